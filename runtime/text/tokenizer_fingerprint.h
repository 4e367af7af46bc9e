// The tokenizer's identity as text: what the engine's segment keys, prompt plans and the ingest
// database record, so a cache entry made with one tokenizer is never used with another.
#pragma once
#include <string>

#include "runtime/text/tokenizer.h"

namespace hypic {

// 16 lower-case hex digits of Tokenizer::fingerprint().
std::string tokenizer_fingerprint(const Tokenizer& tokenizer);

}  // namespace hypic
