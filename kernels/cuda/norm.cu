#include "kernels/cuda/check.h"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/norm.h"

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

__global__ void rmsnorm_gated_kernel(const bf16* o, const bf16* __restrict__ z, bf16* y, int64_t rows, int dim,
                                     const float* __restrict__ w, float eps) {
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
  rmsnorm_kernel<bf16><<<detail::blocks_for(rows, kWarps), kWarps * 32, 0, stream>>>(x, y, rows, int(dim), w, eps,
                                                                                      zero_centred);
  HYPIC_CUDA_LAUNCH_CHECK();
}

void rmsnorm(const float* x, bf16* y, int64_t rows, int64_t dim, const float* w, float eps, bool zero_centred,
             cudaStream_t stream) {
  check_rows(rows, dim, "rmsnorm");
  if (rows == 0) return;
  rmsnorm_kernel<float><<<detail::blocks_for(rows, kWarps), kWarps * 32, 0, stream>>>(x, y, rows, int(dim), w, eps,
                                                                                       zero_centred);
  HYPIC_CUDA_LAUNCH_CHECK();
}

void rmsnorm_gated_silu(const bf16* o, const bf16* z, bf16* y, int64_t rows, int64_t dim, const float* w, float eps,
                        cudaStream_t stream) {
  check_rows(rows, dim, "rmsnorm_gated_silu");
  if (rows == 0) return;
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
