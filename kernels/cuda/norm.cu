#include <cstdint>
#include <type_traits>

#include "kernels/cuda/check.h"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/norm.h"
#include "kernels/cuda/pdl_launch.cuh"
#include "kernels/cuda/row_norm8.cuh"

namespace hypic::cuda {
namespace {

using detail::to_f;
using detail::warp_sum;

constexpr int kWarps = 4;  // rows per block: one warp per row (head rows are short, hidden rows 2-4k)

// Rows are read twice (sum of squares, then scale): the second pass hits L1/L2.
template <class TIn>
__global__ void rmsnorm_kernel(const TIn* x, bf16* y, int64_t rows, int dim, const float* __restrict__ w,
                               float eps, bool zc) {
  const int64_t r = int64_t(blockIdx.x) * kWarps + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (r >= rows) return;
  const TIn* xr = x + r * dim;
  float ss = 0;
  for (int i = lane; i < dim; i += 32) {
    const float v = to_f(xr[i]);
    ss += v * v;
  }
  const float inv = rsqrtf(warp_sum(ss) / dim + eps);
  bf16* yr = y + r * dim;
  for (int i = lane; i < dim; i += 32) yr[i] = __float2bfloat16_rn(to_f(xr[i]) * inv * (zc ? 1.0f + w[i] : w[i]));
}

// Wide rows (the hidden state, 1-4k): one block of 256 threads per row, each thread holding its up to 16
// strided elements in registers, so a row is read once with every load in flight together. With one
// warp per row a decode step's single row kept one SM busy and waited on 64 loads in sequence.
constexpr int kWideThreads = 256, kWidePer = 16;

template <class TIn>
__global__ void __launch_bounds__(kWideThreads) rmsnorm_wide_kernel(const TIn* x, bf16* y, int dim,
                                                                     const float* __restrict__ w, float eps, bool zc) {
  __shared__ float part[kWideThreads / 32];
  const TIn* xr = x + int64_t(blockIdx.x) * dim;
  float v[kWidePer];
  float ss = 0;
#pragma unroll
  for (int k = 0; k < kWidePer; ++k) {
    const int i = threadIdx.x + k * kWideThreads;
    v[k] = i < dim ? to_f(xr[i]) : 0.0f;
    ss += v[k] * v[k];
  }
  ss = warp_sum(ss);
  if (threadIdx.x % 32 == 0) part[threadIdx.x / 32] = ss;
  __syncthreads();
  float tot = 0;
#pragma unroll
  for (int i = 0; i < kWideThreads / 32; ++i) tot += part[i];
  const float inv = rsqrtf(tot / dim + eps);
  bf16* yr = y + int64_t(blockIdx.x) * dim;
#pragma unroll
  for (int k = 0; k < kWidePer; ++k) {
    const int i = threadIdx.x + k * kWideThreads;
    if (i < dim) yr[i] = __float2bfloat16_rn(v[k] * inv * (zc ? 1.0f + w[i] : w[i]));
  }
}

// fp32 rows of a whole number of 256 columns: one block a row, 8 columns a thread with 16-byte loads, summed in
// detail::norm_row8's order (the MoE's residual add that norms its row gives the same bits).
__global__ void rmsnorm_rows8_kernel(const float* __restrict__ x, bf16* y, int dim, const float* __restrict__ w,
                                     float eps, bool zc) {
  detail::pdl_wait();
  __shared__ float part[32];
  const float* xr = x + int64_t(blockIdx.x) * dim + 8 * threadIdx.x;
  const float4 a = *reinterpret_cast<const float4*>(xr), b = *reinterpret_cast<const float4*>(xr + 4);
  const float v[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
  detail::norm_row8(v, dim, w, eps, zc, y + int64_t(blockIdx.x) * dim, part);
}

template <class TIn>
void launch_rmsnorm(const TIn* x, bf16* y, int64_t rows, int64_t dim, const float* w, float eps, bool zc,
                    cudaStream_t stream) {
  if constexpr (std::is_same_v<TIn, float>) {
    if (detail::row_norm8_fits(dim, x, w, y) && rows <= 2147483647) {
      detail::launch_pdl(detail::pdl_chain_enabled(), rmsnorm_rows8_kernel, dim3(unsigned(rows)),
                         dim3(unsigned(dim / 8)), 0, stream, x, y, int(dim), w, eps, zc);
      return;
    }
  }
  if (dim >= 1024 && dim <= int64_t{kWideThreads} * kWidePer && rows <= 2147483647)
    rmsnorm_wide_kernel<TIn><<<unsigned(rows), kWideThreads, 0, stream>>>(x, y, int(dim), w, eps, zc);
  else
    rmsnorm_kernel<TIn><<<detail::blocks_for(rows, kWarps), kWarps * 32, 0, stream>>>(x, y, rows, int(dim), w, eps, zc);
}

__global__ void rmsnorm_gated_kernel(const bf16* o, const bf16* __restrict__ z, bf16* y, int64_t rows, int dim,
                                     const float* __restrict__ w, float eps) {
  detail::pdl_trigger();  // a programmatically launched successor (cuda::gemv) may start
  const int64_t r = int64_t(blockIdx.x) * kWarps + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (r >= rows) return;
  const bf16* orow = o + r * dim;
  float ss = 0;
  for (int i = lane; i < dim; i += 32) {
    const float v = to_f(orow[i]);
    ss += v * v;
  }
  const float inv = rsqrtf(warp_sum(ss) / dim + eps);
  const bf16* zr = z + r * dim;
  bf16* yr = y + r * dim;
  for (int i = lane; i < dim; i += 32)
    yr[i] = __float2bfloat16_rn(w[i] * (to_f(orow[i]) * inv) * detail::silu_f(to_f(zr[i])));
}

// The same for dim % 4 == 0 and dim <= 256 with 8-byte aligned rows (the GDN heads: dim 128): lane l takes
// elements 4 l .. 4 l + 3 (and 128 on), loaded once as 8 bytes with their gates and weights. One warp a row.
constexpr int kGatedChunks = 2;
__global__ void rmsnorm_gated4_kernel(const bf16* o, const bf16* __restrict__ z, bf16* y, int64_t rows, int dim,
                                      const float* __restrict__ w, float eps) {
  detail::pdl_trigger();
  const int64_t r = int64_t(blockIdx.x) * kWarps + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (r >= rows) return;
  float ov[kGatedChunks][4], zv[kGatedChunks][4];
  float ss = 0;
#pragma unroll
  for (int j = 0; j < kGatedChunks; ++j) {
    const int i = 4 * lane + 128 * j;
    if (i >= dim) break;
    const uint2 ou = *reinterpret_cast<const uint2*>(o + r * dim + i);
    const uint2 zu = *reinterpret_cast<const uint2*>(z + r * dim + i);
    const __nv_bfloat162* oh = reinterpret_cast<const __nv_bfloat162*>(&ou);
    const __nv_bfloat162* zh = reinterpret_cast<const __nv_bfloat162*>(&zu);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float2 of = __bfloat1622float2(oh[h]), zf = __bfloat1622float2(zh[h]);
      ov[j][2 * h] = of.x;
      ov[j][2 * h + 1] = of.y;
      zv[j][2 * h] = zf.x;
      zv[j][2 * h + 1] = zf.y;
    }
#pragma unroll
    for (int e = 0; e < 4; ++e) ss += ov[j][e] * ov[j][e];
  }
  const float inv = rsqrtf(warp_sum(ss) / dim + eps);
#pragma unroll
  for (int j = 0; j < kGatedChunks; ++j) {
    const int i = 4 * lane + 128 * j;
    if (i >= dim) break;
    const float4 wv = *reinterpret_cast<const float4*>(w + i);
    const float wa[4] = {wv.x, wv.y, wv.z, wv.w};
    uint2 out;
    __nv_bfloat162* yh = reinterpret_cast<__nv_bfloat162*>(&out);
#pragma unroll
    for (int h = 0; h < 2; ++h)
      yh[h] = __floats2bfloat162_rn(wa[2 * h] * (ov[j][2 * h] * inv) * detail::silu_f(zv[j][2 * h]),
                                    wa[2 * h + 1] * (ov[j][2 * h + 1] * inv) * detail::silu_f(zv[j][2 * h + 1]));
    *reinterpret_cast<uint2*>(y + r * dim + i) = out;
  }
}

// The same for rows of 8 to 256 elements, a power of two (the GDN heads: 128), 16-byte aligned: dim / 8 lanes
// a row (several rows a warp), eight elements a lane in one 16-byte load each of o and z, the sum over the
// row's lanes by an xor butterfly (every lane of the row gets the same sum).
__global__ void rmsnorm_gated8_kernel(const bf16* o, const bf16* __restrict__ z, bf16* y, int64_t rows, int dim,
                                      const float* __restrict__ w, float eps) {
  detail::pdl_wait();
  detail::pdl_trigger();
  const int G = dim / 8;
  const int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x, r = t / G;
  const int c = 8 * int(t % G);
  const bool ok = r < rows;
  float ov[8], zv[8];
  if (ok) {
    detail::bf16x8_to_float(*reinterpret_cast<const uint4*>(o + r * dim + c), ov);
    detail::bf16x8_to_float(*reinterpret_cast<const uint4*>(z + r * dim + c), zv);
  } else {  // past the last row: zeros, so that the whole warp still joins the shuffles
#pragma unroll
    for (int e = 0; e < 8; ++e) ov[e] = zv[e] = 0.0f;
  }
  const float inv = detail::gated_inv8(ov, dim, eps);
  if (!ok) return;
  const uint4 out = detail::gated_out8(ov, zv, inv, w + c);
  *reinterpret_cast<uint4*>(y + r * dim + c) = out;
}

__global__ void l2norm_kernel(bf16* x, int64_t rows, int dim, float eps, float scale) {
  const int64_t r = int64_t(blockIdx.x) * kWarps + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (r >= rows) return;
  bf16* xr = x + r * dim;
  float ss = 0;
  for (int i = lane; i < dim; i += 32) {
    const float v = to_f(xr[i]);
    ss += v * v;
  }
  const float f = scale * rsqrtf(warp_sum(ss) + eps);
  for (int i = lane; i < dim; i += 32) xr[i] = __float2bfloat16_rn(to_f(xr[i]) * f);
}

void check_rows(int64_t rows, int64_t dim, const char* op) {
  HYPIC_CUDA_REQUIRE(rows >= 0 && dim > 0 && dim <= (int64_t{1} << 30), std::string(op) + ": bad row shape");
}

}  // namespace

void rmsnorm(const bf16* x, bf16* y, int64_t rows, int64_t dim, const float* w, float eps, bool zero_centred,
             cudaStream_t stream) {
  check_rows(rows, dim, "rmsnorm");
  if (rows == 0) return;
  launch_rmsnorm(x, y, rows, dim, w, eps, zero_centred, stream);
  HYPIC_CUDA_LAUNCH_CHECK();
}

void rmsnorm(const float* x, bf16* y, int64_t rows, int64_t dim, const float* w, float eps, bool zero_centred,
             cudaStream_t stream) {
  check_rows(rows, dim, "rmsnorm");
  if (rows == 0) return;
  launch_rmsnorm(x, y, rows, dim, w, eps, zero_centred, stream);
  HYPIC_CUDA_LAUNCH_CHECK();
}

void rmsnorm_gated_silu(const bf16* o, const bf16* z, bf16* y, int64_t rows, int64_t dim, const float* w, float eps,
                        cudaStream_t stream) {
  check_rows(rows, dim, "rmsnorm_gated_silu");
  if (rows == 0) return;
  const uintptr_t bits = reinterpret_cast<uintptr_t>(o) | reinterpret_cast<uintptr_t>(z) | reinterpret_cast<uintptr_t>(y);
  const bool vec = dim % 4 == 0 && dim <= 128 * kGatedChunks && (bits & 7) == 0 &&
                   (reinterpret_cast<uintptr_t>(w) & 15) == 0;
  if (vec && dim >= 8 && (dim & (dim - 1)) == 0 && (bits & 15) == 0 &&
      (rows * (dim / 8) + 127) / 128 <= INT32_MAX)
    detail::launch_pdl(detail::pdl_chain_enabled(), rmsnorm_gated8_kernel,
                       dim3(detail::blocks_for(rows * (dim / 8), 128)), dim3(128), 0, stream, o, z, y, rows, int(dim),
                       w, eps);
  else if (vec)
    rmsnorm_gated4_kernel<<<detail::blocks_for(rows, kWarps), kWarps * 32, 0, stream>>>(o, z, y, rows, int(dim), w, eps);
  else
    rmsnorm_gated_kernel<<<detail::blocks_for(rows, kWarps), kWarps * 32, 0, stream>>>(o, z, y, rows, int(dim), w, eps);
  HYPIC_CUDA_LAUNCH_CHECK();
}

void l2norm_rows(bf16* x, int64_t rows, int64_t dim, float eps, float scale, cudaStream_t stream) {
  check_rows(rows, dim, "l2norm_rows");
  if (rows == 0) return;
  l2norm_kernel<<<detail::blocks_for(rows, kWarps), kWarps * 32, 0, stream>>>(x, rows, int(dim), eps, scale);
  HYPIC_CUDA_LAUNCH_CHECK();
}

}  // namespace hypic::cuda
