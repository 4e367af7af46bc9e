#include "runtime/text/utf8.h"

namespace hypic::utf8 {

namespace {

// Allowed range of the second byte given the lead byte (Unicode Table 3-7); the rest are 80..BF.
bool second_ok(unsigned char lead, unsigned char b) {
  if (lead == 0xE0) return b >= 0xA0 && b <= 0xBF;
  if (lead == 0xED) return b >= 0x80 && b <= 0x9F;
  if (lead == 0xF0) return b >= 0x90 && b <= 0xBF;
  if (lead == 0xF4) return b >= 0x80 && b <= 0x8F;
  return b >= 0x80 && b <= 0xBF;
}

// Number of bytes at s[i] that form a valid prefix of some character (the "maximal subpart"); at least 1.
size_t maximal_subpart(std::string_view s, size_t i) {
  const unsigned char lead = static_cast<unsigned char>(s[i]);
  const int n = sequence_length(lead);
  if (n <= 1) return 1;
  size_t k = 1;
  while (k < static_cast<size_t>(n) && i + k < s.size()) {
    const unsigned char b = static_cast<unsigned char>(s[i + k]);
    const bool ok = (k == 1) ? second_ok(lead, b) : (b >= 0x80 && b <= 0xBF);
    if (!ok) break;
    ++k;
  }
  return k;
}

}  // namespace

size_t valid_char_length(std::string_view s, size_t i) {
  const unsigned char lead = static_cast<unsigned char>(s[i]);
  const int n = sequence_length(lead);
  if (n == 0) return 0;
  if (n == 1) return 1;
  if (i + n > s.size()) return 0;
  if (!second_ok(lead, static_cast<unsigned char>(s[i + 1]))) return 0;
  for (int k = 2; k < n; ++k) {
    const unsigned char b = static_cast<unsigned char>(s[i + k]);
    if (b < 0x80 || b > 0xBF) return 0;
  }
  return static_cast<size_t>(n);
}

size_t find_invalid(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    if (static_cast<unsigned char>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    const size_t n = valid_char_length(s, i);
    if (n == 0) return i;
    i += n;
  }
  return std::string_view::npos;
}

char32_t decode_at(std::string_view s, size_t i, int* len) {
  const unsigned char b0 = static_cast<unsigned char>(s[i]);
  const int n = sequence_length(b0);
  *len = n;
  if (n == 1) return b0;
  char32_t cp = b0 & (0xFF >> (n + 1));
  for (int k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
  return cp;
}

void append(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

std::string to_valid_lossy(std::string_view s) {
  if (find_invalid(s) == std::string_view::npos) return std::string(s);
  std::string out;
  out.reserve(s.size() + 8);
  size_t i = 0;
  while (i < s.size()) {
    const size_t n = valid_char_length(s, i);
    if (n > 0) {
      out.append(s.data() + i, n);
      i += n;
    } else {
      out += "\xEF\xBF\xBD";
      i += maximal_subpart(s, i);
    }
  }
  return out;
}

size_t complete_prefix(std::string_view s) {
  // Only the last 3 bytes can hold an unfinished character.
  const size_t start = s.size() > 3 ? s.size() - 3 : 0;
  for (size_t i = start; i < s.size(); ++i) {
    const unsigned char b = static_cast<unsigned char>(s[i]);
    if (b < 0x80 || (b >= 0x80 && b <= 0xBF)) continue;  // ASCII or continuation
    const int n = sequence_length(b);
    if (n == 0) continue;
    if (i + n > s.size() && maximal_subpart(s, i) == s.size() - i) return i;  // valid so far, not finished
  }
  return s.size();
}

}  // namespace hypic::utf8
