#include "kernels/cuda/check.h"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/engine_state_ops.h"

#include <algorithm>

namespace hypic::cuda {
namespace {

__global__ void identity_kernel(float* T, int64_t n, int64_t d) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const int64_t e = i % (d * d);
  T[i] = (e / d == e % d) ? 1.0f : 0.0f;
}

__global__ void add_scaled_kernel(float* out, const float* a, float alpha, const float* b, int64_t n) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = a[i] + alpha * b[i];
}

constexpr int kChainCols = 32, kChainThreads = 256, kChainRowGroups = kChainThreads / kChainCols;
constexpr int kChainMaxDk = 128, kChainKTile = 32;

__global__ void __launch_bounds__(kChainThreads)
    state_chain_kernel(int dk, int dv, const StateStep* __restrict__ steps, int n, float* __restrict__ S) {
  __shared__ float s_tile[kChainMaxDk][kChainCols];
  __shared__ float t_tile[kChainMaxDk][kChainKTile + 1];
  const int h = blockIdx.x, c0 = blockIdx.y * kChainCols;
  const int c = threadIdx.x % kChainCols, grp = threadIdx.x / kChainCols;
  const bool col = c0 + c < dv;
  constexpr int kRows = kChainMaxDk / kChainRowGroups;  // rows i = grp + kChainRowGroups * j
  const size_t so = size_t(h) * dk * dv, to = size_t(h) * dk * dk;
  for (int i = grp; i < dk; i += kChainRowGroups) s_tile[i][c] = col ? S[so + size_t(i) * dv + c0 + c] : 0.0f;
  __syncthreads();
  for (int st = 0; st < n; ++st) {
    const StateStep step = steps[st];
    if (step.before && col)
      for (int i = grp; i < dk; i += kChainRowGroups) step.before[so + size_t(i) * dv + c0 + c] = s_tile[i][c];
    float acc[kRows];
#pragma unroll
    for (int j = 0; j < kRows; ++j) {
      const int i = grp + kChainRowGroups * j;
      acc[j] = (i < dk && !step.T) ? s_tile[i][c] : 0.0f;
    }
    if (step.T) {
      const float* T = step.T + to;
      for (int k0 = 0; k0 < dk; k0 += kChainKTile) {
        for (int e = threadIdx.x; e < dk * kChainKTile; e += kChainThreads) {
          const int i = e / kChainKTile, kk = e % kChainKTile;
          t_tile[i][kk] = k0 + kk < dk ? T[size_t(i) * dk + k0 + kk] : 0.0f;
        }
        __syncthreads();
        const int kn = dk - k0 < kChainKTile ? dk - k0 : kChainKTile;
        for (int kk = 0; kk < kn; ++kk) {
          const float sv = s_tile[k0 + kk][c];
#pragma unroll
          for (int j = 0; j < kRows; ++j) {
            const int i = grp + kChainRowGroups * j;
            if (i < dk) acc[j] = fmaf(t_tile[i][kk], sv, acc[j]);
          }
        }
        __syncthreads();
      }
    }
#pragma unroll
    for (int j = 0; j < kRows; ++j) {
      const int i = grp + kChainRowGroups * j;
      if (i >= dk) continue;
      float v = acc[j];
      if (step.B && col) v += step.B[so + size_t(i) * dv + c0 + c];
      s_tile[i][c] = v;
      if (step.after && col) step.after[so + size_t(i) * dv + c0 + c] = v;
    }
    __syncthreads();
  }
  if (col)
    for (int i = grp; i < dk; i += kChainRowGroups) S[so + size_t(i) * dv + c0 + c] = s_tile[i][c];
}

__global__ void copy_batched_kernel(const void* const* src, void* const* dst, const int64_t* sizes, size_t all) {
  const char* s = static_cast<const char*>(src[blockIdx.y]);
  char* d = static_cast<char*>(dst[blockIdx.y]);
  if (!d) return;
  const size_t bytes = sizes ? size_t(sizes[blockIdx.y]) : all;
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  const size_t t = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (((reinterpret_cast<uintptr_t>(s) | reinterpret_cast<uintptr_t>(d) | bytes) & 15) == 0) {
    const uint4* s4 = reinterpret_cast<const uint4*>(s);
    uint4* d4 = reinterpret_cast<uint4*>(d);
    for (size_t i = t; i < bytes / 16; i += stride) d4[i] = s4[i];
  } else {
    for (size_t i = t; i < bytes; i += stride) d[i] = s[i];
  }
}

__global__ void zero_leading_kernel(const float* g, const float* beta, float* g_out, float* beta_out,
                                    const int32_t* cu, const int32_t* lead, int64_t H) {
  const int64_t s0 = cu[blockIdx.y], len = cu[blockIdx.y + 1] - s0, zero = int64_t(lead[blockIdx.y]) * H;
  const int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= len * H) return;
  const int64_t at = s0 * H + e;
  g_out[at] = e < zero ? 0.0f : g[at];
  beta_out[at] = e < zero ? 0.0f : beta[at];
}

}  // namespace

void state_chain(int64_t H, int64_t dk, int64_t dv, const StateStep* steps, int64_t n, float* S, cudaStream_t stream) {
  HYPIC_CUDA_REQUIRE(dk > 0 && dk <= kChainMaxDk && dv > 0 && H > 0, "state_chain: dk must be in [1, 128]");
  if (n <= 0) return;
  const dim3 grid(unsigned(H), detail::blocks_for(dv, kChainCols));
  state_chain_kernel<<<grid, kChainThreads, 0, stream>>>(int(dk), int(dv), steps, int(n), S);
  HYPIC_CUDA_LAUNCH_CHECK();
}

void copy_batched(const void* const* src, void* const* dst, const int64_t* sizes, int64_t n, size_t bytes,
                  cudaStream_t stream) {
  if (n <= 0 || bytes == 0) return;
  HYPIC_CUDA_REQUIRE(n <= 65535, "copy_batched: at most 65535 copies per call");
  const unsigned x = static_cast<unsigned>(std::min<size_t>(64, (bytes / 16 + 255) / 256 + 1));
  copy_batched_kernel<<<dim3(x, unsigned(n)), 256, 0, stream>>>(src, dst, sizes, bytes);
  HYPIC_CUDA_LAUNCH_CHECK();
}

void zero_leading_rows(const float* g, const float* beta, float* g_out, float* beta_out, const int32_t* cu,
                       const int32_t* lead, int64_t n, int64_t max_len, int64_t H, cudaStream_t stream) {
  if (n <= 0 || max_len <= 0) return;
  HYPIC_CUDA_REQUIRE(n <= 65535, "zero_leading_rows: at most 65535 sequences per call");
  const dim3 grid(detail::blocks_for(max_len * H, 256), unsigned(n));
  zero_leading_kernel<<<grid, 256, 0, stream>>>(g, beta, g_out, beta_out, cu, lead, H);
  HYPIC_CUDA_LAUNCH_CHECK();
}

void identity_operators(float* T, int64_t heads, int64_t d, cudaStream_t stream) {
  const int64_t n = heads * d * d;
  if (n <= 0) return;
  identity_kernel<<<detail::blocks_for(n, 256), 256, 0, stream>>>(T, n, d);
  HYPIC_CUDA_LAUNCH_CHECK();
}

void add_scaled(float* out, const float* a, float alpha, const float* b, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  add_scaled_kernel<<<detail::blocks_for(n, 256), 256, 0, stream>>>(out, a, alpha, b, n);
  HYPIC_CUDA_LAUNCH_CHECK();
}

}  // namespace hypic::cuda
