#include "kernels/cuda/check.h"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/engine_state_ops.h"

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

}  // namespace

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
