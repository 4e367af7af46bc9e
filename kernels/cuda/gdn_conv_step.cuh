// One token of a Gated DeltaNet layer's causal conv for one channel, split into what can be read before the
// token exists (the channel's taps and its tail: the previous tokens' inputs) and what needs it, so that a
// programmatically launched kernel reads the former before its wait. conv_split_rows_kernel (model_glue.cu)
// and gdn_conv_recurrent_kernel (delta_rule_recurrent.cu) both go through these, so they agree bit for bit.
//   tail: [K-1, C] bf16, oldest first; w: [C, K] bf16; 2 <= K <= kConvStepMaxK.
#pragma once
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/types.h"

namespace hypic::cuda::detail {

constexpr int kConvStepMaxK = 8;

struct ConvTaps {
  float win[kConvStepMaxK - 1];  // the tail, oldest first (0 past K - 1)
  float w[kConvStepMaxK];        // the channel's taps (0 past K)
};

__device__ __forceinline__ ConvTaps conv_taps(const bf16* tail, int64_t C, int64_t c, const bf16* w, int K) {
  ConvTaps t;
  const int P = K - 1;
#pragma unroll
  for (int m = 0; m < kConvStepMaxK - 1; ++m) t.win[m] = m < P ? __bfloat162float(tail[int64_t(m) * C + c]) : 0.0f;
#pragma unroll
  for (int m = 0; m < kConvStepMaxK; ++m) t.w[m] = m < K ? __bfloat162float(w[c * K + m]) : 0.0f;
  return t;
}

// conv + SiLU of the token's input xin, rounded to bf16 as the conv's output is.
__device__ __forceinline__ float conv_apply(const ConvTaps& t, int K, bf16 xin) {
  const int P = K - 1;
  float acc = 0.0f;
#pragma unroll
  for (int m = 0; m < kConvStepMaxK; ++m) {
    if (m >= K) break;
    const float in = m < P ? t.win[m] : __bfloat162float(xin);
    acc += t.w[m] * in;
  }
  return round_bf16(silu_f(acc));
}

// The channel's tail advanced by the token.
__device__ __forceinline__ void conv_advance(bf16* tail, int64_t C, int64_t c, const ConvTaps& t, int K, bf16 xin) {
  const int P = K - 1;
#pragma unroll
  for (int m = 0; m < kConvStepMaxK - 1; ++m) {
    if (m >= P) break;
    tail[int64_t(m) * C + c] = m + 1 < P ? __float2bfloat16_rn(t.win[m + 1]) : xin;
  }
}

}  // namespace hypic::cuda::detail
