// PlanTokenizer over the runtime's tokenizer.json tokenizer, so plans carry the real ids and keys.
#pragma once
#include <string>

#include "dsl/plan_tokenizer.h"
#include "runtime/text/tokenizer.h"

namespace hypic::dsl {

class HfPlanTokenizer : public PlanTokenizer {
 public:
  explicit HfPlanTokenizer(const Tokenizer& tok) : tok_(tok) {}
  std::vector<int> encode(const std::string& text) const override { return tok_.encode(text); }
  // The same string the engine puts in its keys: tokenizer_fingerprint().
  std::string fingerprint() const override;

 private:
  const Tokenizer& tok_;
};

}  // namespace hypic::dsl
