#include "runtime/text/added_tokens.h"

#include <unicode/uchar.h>

#include <algorithm>
#include <cstring>

#include "runtime/text/utf8.h"

namespace hypic {

namespace {

// Rust's char::is_whitespace (White_Space) and is_alphanumeric (Alphabetic or category N), which
// the reference uses for lstrip/rstrip and single_word.
bool is_space(char32_t c) { return u_hasBinaryProperty(static_cast<UChar32>(c), UCHAR_WHITE_SPACE); }
bool is_word(char32_t c) {
  if (u_hasBinaryProperty(static_cast<UChar32>(c), UCHAR_ALPHABETIC)) return true;
  const int8_t t = u_charType(static_cast<UChar32>(c));
  return t == U_DECIMAL_DIGIT_NUMBER || t == U_LETTER_NUMBER || t == U_OTHER_NUMBER;
}

// The character ending just before byte `pos` (pos > 0, valid UTF-8).
char32_t char_before(std::string_view s, size_t pos, size_t* start) {
  size_t b = pos - 1;
  while (b > 0 && (static_cast<unsigned char>(s[b]) & 0xC0) == 0x80) --b;
  int len = 0;
  *start = b;
  return utf8::decode_at(s, b, &len);
}

}  // namespace

void AddedTokenMatcher::add(const AddedToken& t) {
  if (t.content.empty()) return;
  tokens_.push_back(t);
  const unsigned char f = static_cast<unsigned char>(t.content[0]);
  auto& list = by_first_byte_[f];
  list.push_back(static_cast<int>(tokens_.size() - 1));
  std::stable_sort(list.begin(), list.end(),
                   [&](int a, int b) { return tokens_[a].content.size() > tokens_[b].content.size(); });
  first_byte_[f] = true;
}

bool AddedTokenMatcher::match_at(std::string_view text, size_t pos, size_t* len, int* index) const {
  for (int k : by_first_byte_[static_cast<unsigned char>(text[pos])]) {
    const AddedToken& t = tokens_[k];
    if (t.content.size() > text.size() - pos) continue;
    if (std::memcmp(text.data() + pos, t.content.data(), t.content.size()) != 0) continue;
    if (t.single_word) {
      size_t s = 0;
      if (pos > 0 && is_word(char_before(text, pos, &s))) continue;
      const size_t e = pos + t.content.size();
      if (e < text.size()) {
        int l = 0;
        if (is_word(utf8::decode_at(text, e, &l))) continue;
      }
    }
    *len = t.content.size();
    *index = k;
    return true;
  }
  return false;
}

void AddedTokenMatcher::split(std::string_view text, std::vector<Segment>& out) const {
  size_t plain_begin = 0;  // start of the pending plain run
  size_t pos = 0;
  while (pos < text.size()) {
    if (!first_byte_[static_cast<unsigned char>(text[pos])]) {
      ++pos;
      continue;
    }
    size_t len = 0;
    int k = -1;
    if (!match_at(text, pos, &len, &k)) {
      ++pos;
      continue;
    }
    const AddedToken& t = tokens_[k];
    size_t b = pos, e = pos + len;
    if (t.lstrip) {
      while (b > plain_begin) {
        size_t s = 0;
        if (!is_space(char_before(text, b, &s))) break;
        b = s;
      }
    }
    if (t.rstrip) {
      while (e < text.size()) {
        int l = 0;
        if (!is_space(utf8::decode_at(text, e, &l))) break;
        e += l;
      }
    }
    if (b > plain_begin) out.push_back({plain_begin, b, -1});
    out.push_back({b, e, t.id});
    plain_begin = pos = e;
  }
  if (plain_begin < text.size()) out.push_back({plain_begin, text.size(), -1});
}

}  // namespace hypic
