// UTF-8 helpers shared by the tokenizer, decoders and the chat renderer.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace hypic::utf8 {

// Length of the sequence a lead byte announces (1..4), or 0 for a byte that cannot start one.
inline int sequence_length(unsigned char lead) {
  if (lead < 0x80) return 1;
  if (lead >= 0xC2 && lead <= 0xDF) return 2;
  if (lead >= 0xE0 && lead <= 0xEF) return 3;
  if (lead >= 0xF0 && lead <= 0xF4) return 4;
  return 0;
}

// Length of the valid, complete scalar value at s[i], or 0 if the bytes there are not one
// (overlong forms, surrogates and values above U+10FFFF are invalid, as in Rust and Python).
size_t valid_char_length(std::string_view s, size_t i);

// Offset of the first byte that does not begin a valid character, or npos when all of s is valid UTF-8.
size_t find_invalid(std::string_view s);

// Decodes the valid character at s[i] (caller checked it with valid_char_length) and its length.
char32_t decode_at(std::string_view s, size_t i, int* len);

void append(std::string& out, char32_t cp);

// Replaces each maximal invalid subpart with U+FFFD, the rule of Rust's from_utf8_lossy (what
// Hugging Face decoders apply to byte-level output).
std::string to_valid_lossy(std::string_view bytes);

// Length of the longest prefix of `bytes` that ends on a character boundary and can be emitted now:
// everything except a trailing incomplete-but-still-valid sequence.
size_t complete_prefix(std::string_view bytes);

}  // namespace hypic::utf8
