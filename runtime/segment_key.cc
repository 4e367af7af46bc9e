#include "runtime/segment_key.h"

#include <openssl/evp.h>

#include <cstring>
#include <stdexcept>

#include "runtime/error.h"

namespace hypic {
namespace {

// Length-prefixed fields keep the encoding unambiguous ("ab"+"c" never equals "a"+"bc").
void put_u32(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(char((v >> (8 * i)) & 0xff));
}
void put_field(std::string& out, std::string_view s) {
  put_u32(out, uint32_t(s.size()));
  out.append(s);
}

SegmentKey truncate(const Sha256Digest& d) {
  SegmentKey k;
  std::memcpy(k.bytes.data(), d.data(), k.bytes.size());
  return k;
}

}  // namespace

Sha256Digest sha256(std::string_view data) {
  // OpenSSL's digest (SHA extensions where the CPU has them: a prompt's keys are on every request's path).
  Sha256Digest out;
  unsigned int n = 0;
  if (EVP_Digest(data.data(), data.size(), out.data(), &n, EVP_sha256(), nullptr) != 1 || n != out.size())
    throw std::runtime_error("SHA-256 failed in OpenSSL");
  return out;
}

std::string to_hex(std::span<const uint8_t> bytes) {
  static const char* digits = "0123456789abcdef";
  std::string s;
  s.reserve(bytes.size() * 2);
  for (uint8_t b : bytes) {
    s.push_back(digits[b >> 4]);
    s.push_back(digits[b & 15]);
  }
  return s;
}

std::string sha256_hex(std::string_view data) { return to_hex(sha256(data)); }

SegmentKey segment_key_from_hex(std::string_view hex) {
  auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  SegmentKey k;
  if (hex.size() != 2 * k.bytes.size())
    throw InvalidArgument("segment key '" + std::string(hex) + "' must be 32 hex digits");
  for (size_t i = 0; i < k.bytes.size(); ++i) {
    const int hi = nibble(hex[2 * i]), lo = nibble(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) throw InvalidArgument("segment key '" + std::string(hex) + "' is not hex");
    k.bytes[i] = uint8_t(hi * 16 + lo);
  }
  return k;
}

SegmentKey content_key(const KeyContext& ctx, std::span<const int> token_ids) {
  std::string enc = "hypic.content.v1";
  put_field(enc, ctx.model_fingerprint);
  put_field(enc, ctx.tokenizer_fingerprint);
  put_u32(enc, uint32_t(ctx.seam_width));
  put_u32(enc, uint32_t(token_ids.size()));
  size_t at = enc.size();
  enc.resize(at + 4 * token_ids.size());
  for (int id : token_ids) {  // little-endian u32s, as put_u32 writes them
    const uint32_t v = uint32_t(id);
    for (int i = 0; i < 4; ++i) enc[at++] = char((v >> (8 * i)) & 0xff);
  }
  return truncate(sha256(enc));
}

SegmentKey chain_key(const std::optional<SegmentKey>& parent, const SegmentKey& content) {
  std::string enc = "hypic.chain.v1";
  enc.push_back(parent ? '\1' : '\0');  // a root segment differs from one after an all-zero parent key
  if (parent) enc.append(reinterpret_cast<const char*>(parent->bytes.data()), parent->bytes.size());
  enc.append(reinterpret_cast<const char*>(content.bytes.data()), content.bytes.size());
  return truncate(sha256(enc));
}

}  // namespace hypic
