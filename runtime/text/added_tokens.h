// Added tokens (special and not): strings matched verbatim in the input and never split by the model.
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace hypic {

struct AddedToken {
  std::string content;
  int id = 0;
  bool special = false;
  bool lstrip = false;       // the match also swallows whitespace before it
  bool rstrip = false;       // ... and after it
  bool single_word = false;  // only matches when not inside a word
  bool normalized = false;   // matched in normalized text rather than raw text
};

// Cuts text into runs of plain text and added-token matches. Matching is leftmost-longest, as in
// Hugging Face tokenizers.
class AddedTokenMatcher {
 public:
  struct Segment {
    size_t begin, end;  // byte range in the text
    int id;             // token id, or -1 for plain text
  };

  void add(const AddedToken& t);
  bool empty() const { return tokens_.empty(); }
  // Appends segments covering `text` in order (plain runs are never empty).
  void split(std::string_view text, std::vector<Segment>& out) const;

 private:
  bool match_at(std::string_view text, size_t pos, size_t* len, int* index) const;

  std::vector<AddedToken> tokens_;
  std::vector<int> by_first_byte_[256];  // indices, longest content first
  bool first_byte_[256] = {};
};

}  // namespace hypic
