#include "kernels/activation.h"

#include <algorithm>

namespace hypic::cpu {

void silu_inplace(float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] = silu(x[i]);
}

void swiglu_inplace(float* gate, const float* up, int64_t n) {
  for (int64_t i = 0; i < n; ++i) gate[i] = silu(gate[i]) * up[i];
}

void softmax_rows(float* x, int64_t rows, int64_t n) {
  for (int64_t r = 0; r < rows; ++r) {
    float* v = x + r * n;
    const float mx = *std::max_element(v, v + n);
    double sum = 0;
    for (int64_t i = 0; i < n; ++i) {
      v[i] = std::exp(v[i] - mx);
      sum += v[i];
    }
    const float inv = static_cast<float>(1.0 / sum);
    for (int64_t i = 0; i < n; ++i) v[i] *= inv;
  }
}

}  // namespace hypic::cpu
