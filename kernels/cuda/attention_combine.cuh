// The combine pass of the split-key attention forms (attention_decode, attention_prefill_split): each
// split wrote an unnormalised partial output and its (max, sum) of base-2 softmax terms; the pass merges
// them per (query row, head).
#pragma once
#include <cstdint>

#include "kernels/cuda/types.h"

namespace hypic::cuda::detail {

// One block per row = query_row * Hq + head (static: each translation unit that launches it has its own).
//   part_o:  [rows, splits, ld] fp32 (the first d columns used);  part_ml: [rows, splits, 2] fp32 (max, sum;
//            a split that saw no key has max -inf);  out: [rows, d] bf16 (zero where no split saw a key).
static __global__ void split_combine_kernel(int64_t splits, int64_t d, int64_t ld, const float* __restrict__ part_o,
                                            const float* __restrict__ part_ml, bf16* __restrict__ out) {
  const int64_t row = blockIdx.x;
  const float* ml = part_ml + row * splits * 2;
  float M = -INFINITY;
  for (int64_t sp = 0; sp < splits; ++sp) M = fmaxf(M, ml[sp * 2]);
  float L = 0.0f;
  for (int64_t sp = 0; sp < splits; ++sp)
    if (ml[sp * 2] != -INFINITY) L += ml[sp * 2 + 1] * exp2f(ml[sp * 2] - M);
  const float inv = L > 0.0f ? 1.0f / L : 0.0f;
  for (int64_t c = threadIdx.x; c < d; c += blockDim.x) {
    float o = 0.0f;
    for (int64_t sp = 0; sp < splits; ++sp)
      if (ml[sp * 2] != -INFINITY) o += part_o[(row * splits + sp) * ld + c] * exp2f(ml[sp * 2] - M);
    out[row * d + c] = __float2bfloat16_rn(o * inv);
  }
}

}  // namespace hypic::cuda::detail
