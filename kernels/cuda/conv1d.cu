#include "kernels/cuda/check.h"
#include "kernels/cuda/conv1d.h"
#include "kernels/cuda/device_util.cuh"

namespace hypic::cuda {
namespace {

constexpr int kMaxK = 8;
constexpr int kTokensPerThread = 16;  // a thread slides its window over this many tokens of one channel

// Threads run along channels (coalesced rows); each keeps its K-tap window in registers.
__global__ void conv_kernel(const bf16* __restrict__ x, int64_t T, int64_t C, const bf16* __restrict__ w, int K,
                            const bf16* __restrict__ tail, bf16* __restrict__ out) {
  const int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= C) return;
  const int64_t t0 = int64_t(blockIdx.y) * kTokensPerThread;
  const int P = K - 1;
  float wc[kMaxK], win[kMaxK];
#pragma unroll
  for (int m = 0; m < kMaxK; ++m) wc[m] = m < K ? __bfloat162float(w[c * K + m]) : 0.0f;
  // win[m] = window[t0 + m], window index tp < P reads the tail.
  auto at = [&](int64_t tp) -> float {
    return tp < P ? __bfloat162float(tail[tp * C + c]) : __bfloat162float(x[(tp - P) * C + c]);
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

}  // namespace

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
