// Depthwise causal 1-D convolution with SiLU (before Gated DeltaNet), same math as kernels/conv1d.h.
// One call serves prefill (T tokens) and decode (T = 1).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/types.h"

namespace hypic::cuda {

// out[t, c] = silu( sum_{m<K} w[c, m] * window[t + m, c] ), window = [tail | x] (tail rows first).
//   x: [T, C] bf16; w: [C, K] bf16 (checkpoint layout of conv1d.weight [C, 1, K]);
//   tail: [K-1, C] bf16 in/out, the previous K-1 inputs, oldest first (updated to the last K-1 inputs);
//   out: [T, C] bf16 (must not alias x or tail). 2 <= K <= 8.
void causal_conv1d_silu(const bf16* x, int64_t T, int64_t C, const bf16* w, int64_t K, bf16* tail, bf16* out,
                        cudaStream_t stream);

}  // namespace hypic::cuda
