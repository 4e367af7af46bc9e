// Depthwise causal 1-D convolution with SiLU, as used before Gated DeltaNet / KDA.
#pragma once
#include <cstdint>

namespace hypic::cpu {

// out[t, c] = silu( sum_{m<K} w[c, m] * x[t - (K-1) + m, c] ), where inputs before t = 0 come from
// `tail` (the previous K-1 inputs, oldest first: tail[j, c], j < K-1).
//   x: [T, C]; w: [C, K]; tail: [K-1, C] in/out (updated to the last K-1 inputs); out: [T, C].
void causal_conv1d_silu(const float* x, int64_t T, int64_t C, const float* w, int64_t K, float* tail,
                        float* out);

}  // namespace hypic::cpu
