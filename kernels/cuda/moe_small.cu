#include "kernels/cuda/check.h"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/moe_small.h"

namespace hypic::cuda {
namespace {

// One output row per warp and many blocks: decode reads each weight once, so what matters is how many
// loads are in flight across the GPU.
constexpr int kWarps = 8, kThreads = kWarps * 32, kRowsPerWarp = 1, kRowsPerBlock = kWarps * kRowsPerWarp;
constexpr int64_t kMaxActElems = 16384;

// This lane's share of w . v over n elements (n % 8 == 0): 16-byte loads, lanes 8 elements apart.
// Weights are read once per call, so they bypass L1.
__device__ __forceinline__ float dot_partial(const __nv_bfloat16* __restrict__ w, const __nv_bfloat16* v, int n,
                                             int lane) {
  float acc = 0.0f;
#pragma unroll 4
  for (int c = lane * 8; c < n; c += 256) {
    const uint4 wv = __ldcs(reinterpret_cast<const uint4*>(w + c));
    const uint4 xv = *reinterpret_cast<const uint4*>(v + c);
    const __nv_bfloat162* w2 = reinterpret_cast<const __nv_bfloat162*>(&wv);
    const __nv_bfloat162* x2 = reinterpret_cast<const __nv_bfloat162*>(&xv);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const float2 a = __bfloat1622float2(w2[j]), b = __bfloat1622float2(x2[j]);
      acc = fmaf(a.x, b.x, fmaf(a.y, b.y, acc));
    }
  }
  return acc;
}

// Block = (16 rows of I, one routed row r = t*K + k); x_t staged in shared memory.
__global__ void __launch_bounds__(kThreads) gate_up_kernel(const __nv_bfloat16* __restrict__ x, int64_t ldx, int D,
                                                           const int32_t* __restrict__ ids, int K,
                                                           const __nv_bfloat16* __restrict__ gate_up, int I,
                                                           __nv_bfloat16* __restrict__ act) {
  extern __shared__ uint4 smem_u4[];
  __nv_bfloat16* xs = reinterpret_cast<__nv_bfloat16*>(smem_u4);
  const int64_t r = blockIdx.y, t = r / K;
  for (int c = threadIdx.x * 8; c < D; c += kThreads * 8)
    *reinterpret_cast<uint4*>(xs + c) = *reinterpret_cast<const uint4*>(x + t * ldx + c);
  __syncthreads();
  const __nv_bfloat16* G = gate_up + int64_t(ids[r]) * 2 * I * D;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
#pragma unroll
  for (int j = 0; j < kRowsPerWarp; ++j) {
    const int i = blockIdx.x * kRowsPerBlock + warp * kRowsPerWarp + j;
    if (i >= I) break;
    const float g = detail::warp_sum(dot_partial(G + int64_t(i) * D, xs, D, lane));
    const float u = detail::warp_sum(dot_partial(G + int64_t(I + i) * D, xs, D, lane));
    if (lane == 0) act[r * I + i] = __float2bfloat16_rn(detail::silu_f(g) * u);
  }
}

// Block = (16 output features, one token); the token's K activation rows staged in shared memory.
__global__ void __launch_bounds__(kThreads) down_kernel(const __nv_bfloat16* __restrict__ act, int K, int I,
                                                        const int32_t* __restrict__ ids,
                                                        const float* __restrict__ weights,
                                                        const __nv_bfloat16* __restrict__ down, int D,
                                                        __nv_bfloat16* __restrict__ y) {
  extern __shared__ uint4 smem_u4[];
  __nv_bfloat16* as = reinterpret_cast<__nv_bfloat16*>(smem_u4);
  const int64_t t = blockIdx.y;
  const int KI = K * I;
  for (int c = threadIdx.x * 8; c < KI; c += kThreads * 8)
    *reinterpret_cast<uint4*>(as + c) = *reinterpret_cast<const uint4*>(act + t * KI + c);
  __syncthreads();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
#pragma unroll
  for (int j = 0; j < kRowsPerWarp; ++j) {
    const int n = blockIdx.x * kRowsPerBlock + warp * kRowsPerWarp + j;
    if (n >= D) break;
    float acc = 0.0f;
#pragma unroll 4
    for (int k = 0; k < K; ++k) {
      const __nv_bfloat16* W = down + (int64_t(ids[t * K + k]) * D + n) * I;
      acc += weights[t * K + k] * dot_partial(W, as + int64_t(k) * I, I, lane);
    }
    acc = detail::warp_sum(acc);
    if (lane == 0) y[t * D + n] = __float2bfloat16_rn(acc);
  }
}

}  // namespace

void moe_small_gate_up(const bf16* x, int64_t T, int64_t ldx, int64_t D, const int32_t* ids, int64_t K,
                       const bf16* gate_up, int64_t I, bf16* act, cudaStream_t stream) {
  if (T <= 0) return;
  HYPIC_CUDA_REQUIRE(D % 8 == 0 && ldx % 8 == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0,
                     "moe_small_gate_up: D and ldx must be multiples of 8, x 16-byte aligned");
  HYPIC_CUDA_REQUIRE(K > 0 && I > 0 && T * K <= 65535, "moe_small_gate_up: needs 0 < T*K <= 65535 and I > 0");
  const dim3 grid(unsigned((I + kRowsPerBlock - 1) / kRowsPerBlock), unsigned(T * K));
  gate_up_kernel<<<grid, kThreads, size_t(D) * 2, stream>>>(x, ldx, int(D), ids, int(K), gate_up, int(I), act);
  HYPIC_CUDA_CHECK(cudaGetLastError());
}

void moe_small_down_combine(const bf16* act, int64_t T, int64_t K, int64_t I, const int32_t* ids,
                            const float* weights, const bf16* down, int64_t D, bf16* y, cudaStream_t stream) {
  if (T <= 0) return;
  HYPIC_CUDA_REQUIRE(I % 8 == 0 && K > 0 && D > 0 && reinterpret_cast<uintptr_t>(act) % 16 == 0,
                     "moe_small_down_combine: I must be a multiple of 8, act 16-byte aligned");
  HYPIC_CUDA_REQUIRE(K * I <= kMaxActElems && T <= 65535, "moe_small_down_combine: K*I or T too large");
  const dim3 grid(unsigned((D + kRowsPerBlock - 1) / kRowsPerBlock), unsigned(T));
  down_kernel<<<grid, kThreads, size_t(K * I) * 2, stream>>>(act, int(K), int(I), ids, weights, down, int(D), y);
  HYPIC_CUDA_CHECK(cudaGetLastError());
}

}  // namespace hypic::cuda
