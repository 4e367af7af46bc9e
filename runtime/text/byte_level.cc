#include "runtime/text/byte_level.h"

#include <array>

#include "runtime/text/utf8.h"

namespace hypic::byte_level {

namespace {

struct Tables {
  std::array<char32_t, 256> to_char{};
  std::array<int16_t, 324> to_byte{};  // indexed by code point, up to U+0143
  Tables() {
    to_byte.fill(-1);
    int next = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      to_char[b] = printable ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + next++);
      to_byte[to_char[b]] = static_cast<int16_t>(b);
    }
  }
};

const Tables& tables() {
  static const Tables t;
  return t;
}

}  // namespace

char32_t byte_to_char(uint8_t b) { return tables().to_char[b]; }

int char_to_byte(char32_t c) { return c < 324 ? tables().to_byte[c] : -1; }

std::string to_bytes(std::string_view token, bool* all_mapped) {
  std::string out;
  out.reserve(token.size());
  bool all = true;
  size_t i = 0;
  while (i < token.size()) {
    const size_t n = utf8::valid_char_length(token, i);
    if (n == 0) {  // not UTF-8: cannot be an alphabet string; keep the byte
      out += token[i++];
      all = false;
      continue;
    }
    int len = 0;
    const char32_t cp = utf8::decode_at(token, i, &len);
    const int b = char_to_byte(cp);
    if (b >= 0) {
      out += static_cast<char>(b);
    } else {
      out.append(token.substr(i, n));
      all = false;
    }
    i += n;
  }
  if (all_mapped) *all_mapped = all;
  return out;
}

}  // namespace hypic::byte_level
