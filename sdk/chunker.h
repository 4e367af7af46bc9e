// Splits a document into chunks of at most N tokens, on paragraph boundaries where possible, then on
// word boundaries. Tokens are counted by a TokenCounter, or as whitespace-separated words without one.
#pragma once
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace hypic::sdk {

class TokenCounter {
 public:
  virtual ~TokenCounter() = default;
  virtual size_t count(std::string_view text) const = 0;
  // Names the counting rule (e.g. a tokenizer fingerprint): stored chunks are redone when it changes.
  virtual std::string id() const = 0;
};

struct TextChunk {
  std::string text;
  size_t tokens = 0;
};

// InvalidArgument when max_tokens is 0. Every chunk has 1..max_tokens tokens, except a single word
// that alone exceeds the bound, which is cut at UTF-8 character boundaries.
std::vector<TextChunk> split_into_chunks(std::string_view text, size_t max_tokens, const TokenCounter* counter);

// Stable id of a chunk: 16 hex digits of SHA-256 over the document path and the chunk text.
std::string chunk_id(const std::string& doc_path, const std::string& chunk_text);

size_t count_words(std::string_view text);

}  // namespace hypic::sdk
