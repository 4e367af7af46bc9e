// What the plan needs from a tokenizer: ids for one block's bytes, and a fingerprint for the keys.
#pragma once
#include <string>
#include <vector>

namespace hypic::dsl {

class PlanTokenizer {
 public:
  virtual ~PlanTokenizer() = default;
  // Special tokens written in `text` (the chat format's framing) encode as their special ids.
  virtual std::vector<int> encode(const std::string& text) const = 0;
  // Changes whenever the same text could encode differently (vocabulary, merges, normalizer).
  virtual std::string fingerprint() const = 0;
};

}  // namespace hypic::dsl
