// A Hugging Face tokenizer.json tokenizer (BPE family: Qwen3, Qwen3.5, Qwen3-Next, and other byte-level
// or byte-fallback BPE models), byte-exact with the Python `tokenizers` package.
//
// Encoding runs: added/special tokens matched in the raw text (never split) -> normalizer -> added
// tokens marked "normalized" -> pre-tokenizer -> BPE per piece (cached). No special tokens are ever
// added around the text (bos/eos belong to the chat format).
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace hypic {

class Tokenizer {
 public:
  // Loads tokenizer.json. IoError if unreadable, FormatError if malformed, ModelError if it uses a
  // component hypic does not implement; every message names the file.
  static Tokenizer from_file(const std::string& path);
  // `where` names the source in error messages.
  static Tokenizer from_json(std::string_view json_text, const std::string& where);

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  // Thread-safe. `text` must be valid UTF-8 (InvalidArgument names the first bad byte otherwise).
  // Special tokens written in the text are recognised and become their ids.
  std::vector<int> encode(std::string_view text) const;

  // Joins the tokens' text. Invalid UTF-8 that the ids spell (e.g. half a character) becomes U+FFFD.
  // InvalidArgument for an id outside the vocabulary.
  std::string decode(std::span<const int> ids, bool skip_special_tokens = false) const;

  std::optional<int> token_to_id(std::string_view token) const;
  // The token's string as in tokenizer.json; InvalidArgument for an unknown id.
  const std::string& id_to_token(int id) const;
  bool is_special(int id) const;
  // One more than the largest id (model vocab and added tokens).
  size_t vocab_size() const;
  // FNV-1a 64 of the tokenizer.json bytes: part of every segment cache key.
  uint64_t fingerprint() const;

 private:
  struct Impl;
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace hypic
