// rmsnorm of an fp32 row held by one block, 8 consecutive columns a thread: shared by cuda::rmsnorm's form
// for such rows and by the MoE's residual add that norms the row it just wrote, so that both give the same bits.
#pragma once
#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/cuda/device_util.cuh"

namespace hypic::cuda::detail {

constexpr int kRow8MaxThreads = 1024;  // dim <= 8192

// Where the row form applies: a whole number of warps of 8 columns, 16-byte aligned rows and weights.
inline bool row_norm8_fits(int64_t dim, const void* x, const void* w, const void* y) {
  auto a16 = [](const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; };
  return dim % 256 == 0 && dim <= 8 * kRow8MaxThreads && a16(x) && a16(w) && a16(y);
}

// Thread t holds columns 8t .. 8t + 7 in v (blockDim.x * 8 == dim). The sum of squares: the thread's eight in
// column order, the warp's butterfly, then the warps' partials in warp order (part: shared, >= 32 floats).
// Writes y_row[c] = bf16(v * rsqrt(mean + eps) * (zc ? 1 + w : w)). Every thread of the block must call it.
__device__ __forceinline__ void norm_row8(const float (&v)[8], int dim, const float* __restrict__ w, float eps,
                                          bool zc, bf16* y_row, float* part) {
  float ss = 0.0f;
#pragma unroll
  for (int i = 0; i < 8; ++i) ss += v[i] * v[i];
  ss = warp_sum(ss);
  if (threadIdx.x % 32 == 0) part[threadIdx.x / 32] = ss;
  __syncthreads();
  float tot = 0.0f;
  for (int i = 0; i < int(blockDim.x / 32); ++i) tot += part[i];
  const float inv = rsqrtf(tot / dim + eps);
  const int c = 8 * threadIdx.x;
  const float4 w0 = *reinterpret_cast<const float4*>(w + c), w1 = *reinterpret_cast<const float4*>(w + c + 4);
  const float wv[8] = {w0.x, w0.y, w0.z, w0.w, w1.x, w1.y, w1.z, w1.w};
  uint4 u;
  __nv_bfloat162* h = reinterpret_cast<__nv_bfloat162*>(&u);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float a = v[2 * i] * inv * (zc ? 1.0f + wv[2 * i] : wv[2 * i]);
    const float b = v[2 * i + 1] * inv * (zc ? 1.0f + wv[2 * i + 1] : wv[2 * i + 1]);
    h[i] = __floats2bfloat162_rn(a, b);
  }
  *reinterpret_cast<uint4*>(y_row + c) = u;
}

// Gated RMS norm of heads of `dim` elements (a power of two, 8..256), 8 consecutive elements a lane, dim / 8
// lanes a head, a head's lanes within one warp: shared by cuda::rmsnorm_gated_silu's 16-byte form and by
// cuda::gemv's gated input, so that both give the same bits. Every lane of the warp calls gated_inv8 (the
// head's sum of squares: the lane's eight in order, then an xor butterfly over its dim / 8 lanes); then
// gated_out8 gives the lane's y = bf16(w * (o * inv) * silu(z)) (w: the head's weights from the lane's column).
__device__ __forceinline__ float gated_inv8(const float (&ov)[8], int dim, float eps) {
  float ss = 0;
#pragma unroll
  for (int e = 0; e < 8; ++e) ss += ov[e] * ov[e];
  for (int m = dim / 16; m >= 1; m /= 2) ss += __shfl_xor_sync(0xffffffffu, ss, m);
  return rsqrtf(ss / dim + eps);
}
__device__ __forceinline__ uint4 gated_out8(const float (&ov)[8], const float (&zv)[8], float inv,
                                            const float* __restrict__ w) {
  const float4 w0 = *reinterpret_cast<const float4*>(w), w1 = *reinterpret_cast<const float4*>(w + 4);
  const float wa[8] = {w0.x, w0.y, w0.z, w0.w, w1.x, w1.y, w1.z, w1.w};
  uint4 out;
  __nv_bfloat162* yh = reinterpret_cast<__nv_bfloat162*>(&out);
#pragma unroll
  for (int h = 0; h < 4; ++h)
    yh[h] = __floats2bfloat162_rn(wa[2 * h] * (ov[2 * h] * inv) * silu_f(zv[2 * h]),
                                  wa[2 * h + 1] * (ov[2 * h + 1] * inv) * silu_f(zv[2 * h + 1]));
  return out;
}

}  // namespace hypic::cuda::detail
