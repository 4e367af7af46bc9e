// The kernels' A/B switches: environment variables read on the host at the call that launches a form.
#pragma once
#include <cstdlib>
#include <cstring>

namespace hypic::cuda {

// True when environment variable `name` is set to `value`.
inline bool env_is(const char* name, const char* value) {
  const char* e = std::getenv(name);
  return e && std::strcmp(e, value) == 0;
}

}  // namespace hypic::cuda
