#include "kernels/cuda/check.h"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/engine_state_ops.h"
#include "kernels/cuda/mma.cuh"

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

}  // namespace

void copy_batched(const void* const* src, void* const* dst, const int64_t* sizes, int64_t n, size_t bytes,
                  cudaStream_t stream) {
  if (n <= 0 || bytes == 0) return;
  HYPIC_CUDA_REQUIRE(n <= 65535, "copy_batched: at most 65535 copies per call");
  const unsigned x = static_cast<unsigned>(std::min<size_t>(64, (bytes / 16 + 255) / 256 + 1));
  copy_batched_kernel<<<dim3(x, unsigned(n)), 256, 0, stream>>>(src, dst, sizes, bytes);
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
