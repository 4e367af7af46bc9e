#include "runtime/text/python_string.h"

namespace hypic {

namespace {

// Length of the whitespace character at s[i] (1..3 bytes), or 0.
size_t space_at(std::string_view s, size_t i) {
  const auto c = static_cast<unsigned char>(s[i]);
  if (c == ' ' || (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x1f)) return 1;
  if (c == 0xc2 && i + 1 < s.size()) {
    const auto d = static_cast<unsigned char>(s[i + 1]);
    return d == 0x85 || d == 0xa0 ? 2 : 0;
  }
  if (i + 2 >= s.size()) return 0;
  const auto d = static_cast<unsigned char>(s[i + 1]), e = static_cast<unsigned char>(s[i + 2]);
  if (c == 0xe1 && d == 0x9a && e == 0x80) return 3;  // U+1680
  if (c == 0xe2 && d == 0x80 && (e <= 0x8a || e == 0xa8 || e == 0xa9 || e == 0xaf)) return 3;
  if (c == 0xe2 && d == 0x81 && e == 0x9f) return 3;  // U+205F
  if (c == 0xe3 && d == 0x80 && e == 0x80) return 3;  // U+3000
  return 0;
}

// Length of the whitespace character ending at s[end - 1], or 0.
size_t space_before(std::string_view s, size_t end) {
  for (size_t n = 1; n <= 3 && n <= end; ++n)
    if (space_at(s, end - n) == n) return n;
  return 0;
}

}  // namespace

std::string python_strip(std::string_view s, size_t* skipped) {
  size_t b = 0;
  while (b < s.size()) {
    const size_t n = space_at(s, b);
    if (n == 0) break;
    b += n;
  }
  size_t e = s.size();
  while (e > b) {
    const size_t n = space_before(s, e);
    if (n == 0) break;
    e -= n;
  }
  if (skipped) *skipped = b;
  return std::string(s.substr(b, e - b));
}

std::string lstrip_newlines(std::string_view s) {
  const size_t b = s.find_first_not_of('\n');
  return b == std::string_view::npos ? std::string() : std::string(s.substr(b));
}

std::string rstrip_newlines(std::string_view s) {
  const size_t e = s.find_last_not_of('\n');
  return e == std::string_view::npos ? std::string() : std::string(s.substr(0, e + 1));
}

std::string split_first(std::string_view s, std::string_view sep) {
  const size_t p = s.find(sep);
  return std::string(p == std::string_view::npos ? s : s.substr(0, p));
}

std::string split_last(std::string_view s, std::string_view sep) {
  const size_t p = s.rfind(sep);
  return std::string(p == std::string_view::npos ? s : s.substr(p + sep.size()));
}

bool starts_with(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }
bool ends_with(std::string_view s, std::string_view p) {
  return s.size() >= p.size() && s.substr(s.size() - p.size()) == p;
}

}  // namespace hypic
