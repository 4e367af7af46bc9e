#include "runtime/text/streaming_decoder.h"

#include <span>

namespace hypic {

namespace {

bool ends_with_replacement(const std::string& s) {
  return s.size() >= 3 && s.compare(s.size() - 3, 3, "\xEF\xBF\xBD") == 0;
}

}  // namespace

StreamingDecoder::StreamingDecoder(const Tokenizer& tok, bool skip_special_tokens)
    : tok_(tok), skip_special_(skip_special_tokens) {}

// Decodes a short window (the last emitted ids as context plus the pending ones) rather than
// tracking bytes, so it is exact for every decoder chain, including ones that treat the first token
// specially. A trailing U+FFFD means a character is still incomplete: hold it back.
std::string StreamingDecoder::push(int id) {
  ids_.push_back(id);
  const std::span<const int> all(ids_);
  const std::string prefix = tok_.decode(all.subspan(prefix_, read_ - prefix_), skip_special_);
  const std::string full = tok_.decode(all.subspan(prefix_), skip_special_);
  if (full.size() <= prefix.size() || ends_with_replacement(full) || full.compare(0, prefix.size(), prefix) != 0)
    return {};
  std::string delta = full.substr(prefix.size());
  prefix_ = read_;
  read_ = ids_.size();
  // Keep the buffer short: only the context window is ever decoded again.
  if (prefix_ > 64) {
    ids_.erase(ids_.begin(), ids_.begin() + static_cast<std::ptrdiff_t>(prefix_));
    read_ -= prefix_;
    prefix_ = 0;
  }
  return delta;
}

std::string StreamingDecoder::finish() {
  const std::span<const int> all(ids_);
  const std::string prefix = tok_.decode(all.subspan(prefix_, read_ - prefix_), skip_special_);
  const std::string full = tok_.decode(all.subspan(prefix_), skip_special_);
  ids_.clear();
  prefix_ = read_ = 0;
  return full.size() > prefix.size() ? full.substr(prefix.size()) : std::string();
}

}  // namespace hypic
