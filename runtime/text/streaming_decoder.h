// Incremental detokenization for generation: feed ids one at a time, get text as soon as it is
// complete. Never emits part of a UTF-8 character; the concatenation of everything emitted equals
// Tokenizer::decode of all ids.
#pragma once
#include <string>
#include <vector>

#include "runtime/text/tokenizer.h"

namespace hypic {

class StreamingDecoder {
 public:
  // The tokenizer must outlive the decoder.
  explicit StreamingDecoder(const Tokenizer& tok, bool skip_special_tokens = false);

  // Returns the newly completed text (often empty while a multi-byte character is still partial).
  // InvalidArgument for an id outside the vocabulary.
  std::string push(int id);
  // Emits whatever is still held back (a truncated character becomes U+FFFD) and resets.
  std::string finish();

 private:
  const Tokenizer& tok_;
  bool skip_special_;
  // ids[prefix_..read_) were already emitted and give the decoders their left context;
  // ids[read_..) are pending.
  std::vector<int> ids_;
  size_t prefix_ = 0, read_ = 0;
};

}  // namespace hypic
