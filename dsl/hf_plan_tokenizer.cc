#include "dsl/hf_plan_tokenizer.h"

#include "runtime/text/tokenizer_fingerprint.h"

namespace hypic::dsl {

std::string HfPlanTokenizer::fingerprint() const { return tokenizer_fingerprint(tok_); }

}  // namespace hypic::dsl
