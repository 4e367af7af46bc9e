// A compiled PCRE2 regular expression (UTF + Unicode properties, JIT when available) used by the
// Split pre-tokenizers. Patterns from tokenizer.json are written for Oniguruma; the syntax they use
// (\p{L}, \s, (?i:...), lookahead) means the same in PCRE2.
#pragma once
#include <cstddef>
#include <string>
#include <string_view>

struct pcre2_real_code_8;

namespace hypic {

class Regex {
 public:
  // Throws FormatError naming `where` if the pattern does not compile.
  Regex(const std::string& pattern, const std::string& where);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Finds the first match in `text` at or after byte `start`; returns false when there is none.
  // `text` must be valid UTF-8 (checked by the caller; PCRE2's own check is skipped for speed).
  bool find(std::string_view text, size_t start, size_t* match_begin, size_t* match_end) const;

 private:
  pcre2_real_code_8* code_ = nullptr;
  bool jit_ = false;
};

}  // namespace hypic
