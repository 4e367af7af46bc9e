#include "kernels/cuda/check.h"
#include "kernels/cuda/spin.h"

namespace hypic::cuda {
namespace {

__device__ __forceinline__ uint64_t global_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__global__ void spin_kernel(uint64_t ns) {
  const uint64_t t0 = global_ns();
  while (global_ns() - t0 < ns) __nanosleep(1000);
}

}  // namespace

void spin(int64_t microseconds, cudaStream_t stream) {
  HYPIC_CUDA_REQUIRE(microseconds >= 0, "spin: a negative time");
  spin_kernel<<<1, 1, 0, stream>>>(uint64_t(microseconds) * 1000);
  HYPIC_CUDA_LAUNCH_CHECK();
}

}  // namespace hypic::cuda
