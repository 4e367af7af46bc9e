// Segment keys (DESIGN §1.1): a content key names a tokenized block wherever it appears, a chain key
// names it after exactly one prefix. Both are the first 128 bits of a SHA-256 over a versioned encoding.
#pragma once
#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace hypic {

using Sha256Digest = std::array<uint8_t, 32>;

// FIPS 180-4 SHA-256 of `data`.
Sha256Digest sha256(std::string_view data);
std::string to_hex(std::span<const uint8_t> bytes);
std::string sha256_hex(std::string_view data);

struct SegmentKey {
  std::array<uint8_t, 16> bytes{};
  std::string hex() const { return to_hex(bytes); }
  bool operator==(const SegmentKey&) const = default;
};

// Throws InvalidArgument unless `hex` is 32 lowercase or uppercase hex digits.
SegmentKey segment_key_from_hex(std::string_view hex);

// What a key depends on besides the tokens: which weights and which tokenizer produced them, and how
// many seam tokens the cached entry skips (an entry built with another seam width is a different entry).
struct KeyContext {
  std::string model_fingerprint;
  std::string tokenizer_fingerprint;
  int seam_width = 8;
};

SegmentKey content_key(const KeyContext& ctx, std::span<const int> token_ids);
// `parent` is the previous segment's chain key, or nullopt for the first segment of a prompt.
SegmentKey chain_key(const std::optional<SegmentKey>& parent, const SegmentKey& content);

}  // namespace hypic
