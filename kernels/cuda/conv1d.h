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

// The same over N packed sequences in one call, each with its own starting tail (the isolated prefills of
// several blocks, or the seams of a stitch that each follow a different cached block).
//   x: [T, C] bf16, sequence i at rows [cu[i], cu[i+1]); cu: [N + 1] int32 on the device, cu[N] = T
//   (T: host value);
//   tails_in: [N] device array of pointers to [K-1, C] bf16 starting tails, a null entry (or a null
//   array) meaning zeros; tails_out: [N] device array of pointers receiving each sequence's last K-1
//   inputs (null entries skipped). A tails_out buffer must not be another sequence's tails_in buffer;
//   a sequence's own tails_in buffer may be its tails_out (updated in place: decode steps).
//   out: [T, C] bf16 (must not alias x or a tail).
void causal_conv1d_silu_varlen(const bf16* x, const int32_t* cu, int64_t N, int64_t T, int64_t C,
                               const bf16* w, int64_t K, const bf16* const* tails_in, bf16* const* tails_out,
                               bf16* out, cudaStream_t stream);

// The conv's output split as Gated DeltaNet reads it, in the same pass (no [T, C] intermediate):
//   channels [0, a) -> q: [T, a] bf16, l2norm over each `head` channels, times q_scale;
//   channels [a, 2a) -> k: [T, a] bf16, l2norm over each head;  channels [2a, C) -> v: [T, C - 2a] bf16 as is;
//   a = key_width. Each value is first rounded to bf16 (what causal_conv1d_silu stores), then
//   l2norm(x) = x / sqrt(sum x^2 + eps) in fp32 (the sum in another order than gdn_split_qkv's).
struct ConvSplit {
  int64_t key_width = 0;  // a: a whole number of heads
  int64_t head = 0;       // channels per q / k head: a power of two in [8, 256]
  float q_scale = 1.0f, eps = 1e-6f;
  bf16 *q = nullptr, *k = nullptr, *v = nullptr;
};
// Whether the split forms take this shape: C % 8 == 0, the head as above, 2a <= C, x, q, k, v 16-byte aligned.
bool conv_split_supported(const bf16* x, int64_t C, const ConvSplit& sp);
// causal_conv1d_silu / causal_conv1d_silu_varlen writing `out` split instead of one [T, C] array (same tails).
void causal_conv1d_silu_split(const bf16* x, int64_t T, int64_t C, const bf16* w, int64_t K, bf16* tail,
                              const ConvSplit& out, cudaStream_t stream);
void causal_conv1d_silu_split_varlen(const bf16* x, const int32_t* cu, int64_t N, int64_t T, int64_t C, const bf16* w,
                                     int64_t K, const bf16* const* tails_in, bf16* const* tails_out,
                                     const ConvSplit& out, cudaStream_t stream);

}  // namespace hypic::cuda
