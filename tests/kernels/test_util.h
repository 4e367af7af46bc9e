// Shared helpers for the kernel tests: seeded random buffers and error measures.
#pragma once
#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

namespace hypic::test {

inline std::vector<float> randn(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

inline std::vector<float> uniform(size_t n, uint32_t seed, float lo, float hi) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

// max |a - b| / max(max |b|, tiny): the normalised error used by every kernel check.
inline float rel_err(const std::vector<float>& a, const std::vector<float>& b) {
  float num = 0, den = 1e-30f;
  for (size_t i = 0; i < a.size(); ++i) {
    num = std::max(num, std::fabs(a[i] - b[i]));
    den = std::max(den, std::fabs(b[i]));
  }
  return num / den;
}

inline void l2norm_heads(std::vector<float>& x, size_t dim) {
  for (size_t r = 0; r < x.size() / dim; ++r) {
    float s = 0;
    for (size_t i = 0; i < dim; ++i) s += x[r * dim + i] * x[r * dim + i];
    s = 1.0f / std::sqrt(s + 1e-6f);
    for (size_t i = 0; i < dim; ++i) x[r * dim + i] *= s;
  }
}

}  // namespace hypic::test
