#include "runtime/cuda/device_memory.h"

#include <cuda_runtime.h>

#include "kernels/cuda/check.h"

namespace hypic {

DeviceMemory::DeviceMemory(size_t bytes, bool zero) : bytes_(bytes) {
  if (bytes == 0) return;
  HYPIC_CUDA_CHECK(cudaMalloc(&p_, bytes));
  if (zero) {
    // Completed before returning: users run on non-blocking streams, which do not wait for stream 0.
    cudaError_t e = cudaMemsetAsync(p_, 0, bytes, 0);
    if (e == cudaSuccess) e = cudaStreamSynchronize(0);
    if (e != cudaSuccess) {
      cudaFree(p_);
      p_ = nullptr;
      HYPIC_CUDA_CHECK(e);
    }
  }
}

DeviceMemory::~DeviceMemory() {
  if (p_ && owned_) cudaFree(p_);
}

DeviceMemory& DeviceMemory::operator=(DeviceMemory&& o) noexcept {
  if (this != &o) {
    if (p_ && owned_) cudaFree(p_);
    p_ = o.p_;
    bytes_ = o.bytes_;
    owned_ = o.owned_;
    o.p_ = nullptr;
    o.bytes_ = 0;
  }
  return *this;
}

}  // namespace hypic
