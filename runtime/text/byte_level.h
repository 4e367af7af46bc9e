// The GPT-2 byte-level alphabet: each byte is shown as a printable code point in vocab strings
// (printable ASCII and most of Latin-1 as themselves, the other 68 bytes as U+0100..U+0143).
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

namespace hypic::byte_level {

char32_t byte_to_char(uint8_t b);
// The byte a code point stands for, or -1 if it is not in the alphabet.
int char_to_byte(char32_t c);
// Maps a vocab string back to bytes; code points outside the alphabet keep their UTF-8 bytes
// (what Hugging Face's ByteLevel decoder does). `all_mapped` (optional) tells whether every one was in it.
std::string to_bytes(std::string_view token, bool* all_mapped = nullptr);

}  // namespace hypic::byte_level
