#include "dsl/hf_plan_tokenizer.h"

#include <cstdio>

namespace hypic::dsl {

std::string tokenizer_fingerprint_hex(const Tokenizer& tok) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(tok.fingerprint()));
  return buf;
}

std::string HfPlanTokenizer::fingerprint() const { return tokenizer_fingerprint_hex(tok_); }

}  // namespace hypic::dsl
