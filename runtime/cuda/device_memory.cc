#include "runtime/cuda/device_memory.h"

#include <cuda_runtime.h>

#include "kernels/cuda/check.h"

namespace hypic {

DeviceMemory::DeviceMemory(size_t bytes, bool zero) : bytes_(bytes) {
  if (bytes == 0) return;
  cudaError_t m = cudaMalloc(&p_, bytes);
  if (m == cudaErrorMemoryAllocation) {  // freed stream-ordered blocks may hold it: give them back, once more
    (void)cudaGetLastError();
    cuda::trim_device_pool();
    m = cudaMalloc(&p_, bytes);
  }
  HYPIC_CUDA_CHECK(m);
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

DeviceMemory::DeviceMemory(size_t bytes, std::shared_ptr<const cuda::Stream> stream, bool zero)
    : bytes_(bytes), stream_(std::move(stream)) {
  if (bytes == 0) return;
  HYPIC_CUDA_CHECK(cudaMallocAsync(&p_, bytes, stream_->get()));
  if (zero) {
    const cudaError_t e = cudaMemsetAsync(p_, 0, bytes, stream_->get());
    if (e != cudaSuccess) {
      release();
      HYPIC_CUDA_CHECK(e);
    }
  }
}

void DeviceMemory::release() {
  if (p_ && owned_) {
    if (stream_) cudaFreeAsync(p_, stream_->get());
    else cudaFree(p_);
  }
  p_ = nullptr;
}

DeviceMemory::~DeviceMemory() { release(); }

DeviceMemory& DeviceMemory::operator=(DeviceMemory&& o) noexcept {
  if (this != &o) {
    release();
    p_ = o.p_;
    bytes_ = o.bytes_;
    owned_ = o.owned_;
    stream_ = std::move(o.stream_);
    o.p_ = nullptr;
    o.bytes_ = 0;
  }
  return *this;
}

}  // namespace hypic
