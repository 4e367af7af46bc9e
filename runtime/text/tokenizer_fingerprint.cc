#include "runtime/text/tokenizer_fingerprint.h"

#include <cstdio>

namespace hypic {

std::string tokenizer_fingerprint(const Tokenizer& tokenizer) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(tokenizer.fingerprint()));
  return buf;
}

}  // namespace hypic
