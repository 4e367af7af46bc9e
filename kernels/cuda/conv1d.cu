#include "kernels/cuda/check.h"
#include "kernels/cuda/conv1d.h"
#include "kernels/cuda/device_util.cuh"

namespace hypic::cuda {
namespace {

constexpr int kMaxK = 8;
constexpr int kTokensPerThread = 16;  // a thread slides its window over this many tokens of one channel

// Threads run along channels (coalesced rows); each keeps its K-tap window in registers. One thread's
// work: channel c of tokens [t0, t0 + kTokensPerThread) of a sequence of T tokens, whose window starts
// with `tail` (the previous K-1 inputs; null: zeros).
__device__ __forceinline__ void conv_span(const bf16* __restrict__ x, int64_t T, int64_t C, const bf16* __restrict__ w,
                                          int K, const bf16* __restrict__ tail, int64_t c, int64_t t0,
                                          bf16* __restrict__ out) {
  const int P = K - 1;
  float wc[kMaxK], win[kMaxK];
#pragma unroll
  for (int m = 0; m < kMaxK; ++m) wc[m] = m < K ? __bfloat162float(w[c * K + m]) : 0.0f;
  // win[m] = window[t0 + m], window index tp < P reads the tail.
  auto at = [&](int64_t tp) -> float {
    if (tp < P) return tail ? __bfloat162float(tail[tp * C + c]) : 0.0f;
    return __bfloat162float(x[(tp - P) * C + c]);
  };
#pragma unroll
  for (int m = 0; m < kMaxK - 1; ++m) win[m] = (m < P) ? at(t0 + m) : 0.0f;
  const int64_t t1 = t0 + kTokensPerThread < T ? t0 + kTokensPerThread : T;
  for (int64_t t = t0; t < t1; ++t) {
    win[P] = at(t + P);
    float s = 0;
#pragma unroll
    for (int m = 0; m < kMaxK; ++m)
      if (m < K) s += wc[m] * win[m];
    out[t * C + c] = __float2bfloat16_rn(detail::silu_f(s));
#pragma unroll
    for (int m = 0; m < kMaxK - 1; ++m) win[m] = win[m + 1];
  }
}

__global__ void conv_kernel(const bf16* __restrict__ x, int64_t T, int64_t C, const bf16* __restrict__ w, int K,
                            const bf16* __restrict__ tail, bf16* __restrict__ out) {
  const int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= C) return;
  conv_span(x, T, C, w, K, tail, c, int64_t(blockIdx.y) * kTokensPerThread, out);
}

// New tail = window rows T .. T+P-1. Rows come from x, or (when T < P) from higher tail rows, read before
// they are overwritten because each thread walks its channel in increasing j.
__global__ void tail_kernel(const bf16* __restrict__ x, int64_t T, int64_t C, int P, bf16* tail) {
  const int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= C) return;
  for (int j = 0; j < P; ++j) {
    const int64_t tp = T + j;
    tail[j * C + c] = tp < P ? tail[tp * C + c] : x[(tp - P) * C + c];
  }
}

// Varlen: blockIdx.z is the sequence; the window's first K-1 rows come from the sequence's own tail.
__global__ void conv_varlen_kernel(const bf16* __restrict__ x, const int32_t* __restrict__ cu, int64_t C,
                                   const bf16* __restrict__ w, int K, const bf16* const* __restrict__ tails,
                                   bf16* __restrict__ out) {
  const int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t s0 = cu[blockIdx.z], T = cu[blockIdx.z + 1] - s0;
  const int64_t t0 = int64_t(blockIdx.y) * kTokensPerThread;
  if (c >= C || t0 >= T) return;
  conv_span(x + s0 * C, T, C, w, K, tails ? tails[blockIdx.z] : nullptr, c, t0, out + s0 * C);
}

__global__ void tail_varlen_kernel(const bf16* __restrict__ x, const int32_t* __restrict__ cu, int64_t C, int P,
                                   const bf16* const* __restrict__ tails_in, bf16* const* __restrict__ tails_out) {
  const int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  bf16* dst = tails_out[blockIdx.y];
  if (c >= C || !dst) return;
  const int64_t s0 = cu[blockIdx.y], T = cu[blockIdx.y + 1] - s0;
  const bf16* src = tails_in ? tails_in[blockIdx.y] : nullptr;
  for (int j = 0; j < P; ++j) {
    const int64_t tp = T + j;
    dst[j * C + c] = tp < P ? (src ? src[tp * C + c] : __float2bfloat16_rn(0.0f)) : x[(s0 + tp - P) * C + c];
  }
}

}  // namespace

void causal_conv1d_silu_varlen(const bf16* x, const int32_t* cu, int64_t N, int64_t max_len, int64_t C,
                               const bf16* w, int64_t K, const bf16* const* tails_in, bf16* const* tails_out,
                               bf16* out, cudaStream_t stream) {
  HYPIC_CUDA_REQUIRE(K >= 2 && K <= kMaxK, "causal_conv1d_silu_varlen: kernel size must be in [2, 8]");
  HYPIC_CUDA_REQUIRE(C > 0 && N >= 0 && max_len >= 0, "causal_conv1d_silu_varlen: bad shape");
  HYPIC_CUDA_REQUIRE(N <= 65535, "causal_conv1d_silu_varlen: at most 65535 sequences per call");
  if (N == 0) return;
  if (max_len > 0) {
    const dim3 grid(detail::blocks_for(C, 128), detail::blocks_for(max_len, kTokensPerThread), unsigned(N));
    HYPIC_CUDA_REQUIRE(grid.y <= 65535, "causal_conv1d_silu_varlen: sequence too long for one call");
    conv_varlen_kernel<<<grid, 128, 0, stream>>>(x, cu, C, w, int(K), tails_in, out);
    HYPIC_CUDA_LAUNCH_CHECK();
  }
  if (tails_out) {
    tail_varlen_kernel<<<dim3(detail::blocks_for(C, 128), unsigned(N)), 128, 0, stream>>>(x, cu, C, int(K - 1),
                                                                                         tails_in, tails_out);
    HYPIC_CUDA_LAUNCH_CHECK();
  }
}

void causal_conv1d_silu(const bf16* x, int64_t T, int64_t C, const bf16* w, int64_t K, bf16* tail, bf16* out,
                        cudaStream_t stream) {
  HYPIC_CUDA_REQUIRE(K >= 2 && K <= kMaxK, "causal_conv1d_silu: kernel size must be in [2, 8]");
  HYPIC_CUDA_REQUIRE(C > 0 && T >= 0, "causal_conv1d_silu: bad shape");
  if (T == 0) return;
  const dim3 grid(detail::blocks_for(C, 128), detail::blocks_for(T, kTokensPerThread));
  HYPIC_CUDA_REQUIRE(grid.y <= 65535, "causal_conv1d_silu: T too long for one call (max 1048560 tokens)");
  conv_kernel<<<grid, 128, 0, stream>>>(x, T, C, w, int(K), tail, out);
  HYPIC_CUDA_LAUNCH_CHECK();
  tail_kernel<<<detail::blocks_for(C, 128), 128, 0, stream>>>(x, T, C, int(K - 1), tail);
  HYPIC_CUDA_LAUNCH_CHECK();
}

}  // namespace hypic::cuda
