// Test helper: a deterministic block of n token ids (in [20, 420), a pure function of seed), the
// content of the cache-record, tier and cache-directory tests' prompts.
#pragma once
#include <cstdint>
#include <vector>

namespace hypic::testing_util {

inline std::vector<int> block(int n, int seed) {
  std::vector<int> v;
  uint32_t x = 2654435761u * (seed + 1);
  for (int i = 0; i < n; ++i) {
    x = x * 1664525u + 1013904223u;
    v.push_back(static_cast<int>((x >> 8) % 400) + 20);
  }
  return v;
}

}  // namespace hypic::testing_util
