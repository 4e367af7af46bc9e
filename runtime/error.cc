#include "runtime/error.h"

#include <cstdio>
#include <cstdlib>

namespace hypic {

void assert_fail(const char* expr, const char* file, int line, const std::string& msg) {
  std::fprintf(stderr, "hypic internal error: %s:%d: assertion `%s` failed: %s\n", file, line, expr,
               msg.c_str());
  std::abort();
}

}  // namespace hypic
