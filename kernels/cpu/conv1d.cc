#include "kernels/conv1d.h"

#include <vector>

#include "kernels/activation.h"

namespace hypic::cpu {

void causal_conv1d_silu(const float* x, int64_t T, int64_t C, const float* w, int64_t K, float* tail,
                        float* out) {
  const int64_t P = K - 1;
  // Window = [tail | x], indexed by t' in [0, P + T).
  auto at = [&](int64_t tp, int64_t c) -> float { return tp < P ? tail[tp * C + c] : x[(tp - P) * C + c]; };
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t c = 0; c < C; ++c) {
      float s = 0;
      for (int64_t m = 0; m < K; ++m) s += w[c * K + m] * at(t + m, c);
      out[t * C + c] = silu(s);
    }
  }
  // New tail = last P rows of the window.
  std::vector<float> nt(static_cast<size_t>(P * C));
  for (int64_t j = 0; j < P; ++j)
    for (int64_t c = 0; c < C; ++c) nt[j * C + c] = at(T + j, c);
  for (int64_t i = 0; i < P * C; ++i) tail[i] = nt[i];
}

}  // namespace hypic::cpu
