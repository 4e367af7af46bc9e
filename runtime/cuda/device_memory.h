// An owning handle of one device block for memory that lives as long as a model or a sequence (weights,
// states): a plain cudaMalloc block, or one from the device's memory pool ordered on a stream. Per-call
// scratch comes from cuda::DevicePool instead.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>

#include "kernels/cuda/memory.h"

namespace hypic {

class DeviceMemory {
 public:
  DeviceMemory() = default;
  // Allocates `bytes` (none for 0); zero-fills the block when `zero`. Throws cuda::CudaError.
  explicit DeviceMemory(size_t bytes, bool zero = false);
  // Stream-ordered: taken from the device's memory pool on `stream` and given back to it there, after the
  // work queued on it before (a sequence's K/V and states come and go with every request: cudaMalloc costs
  // host time and cudaFree synchronises the device). Zero-filled when `zero`, in stream order too: work
  // queued on `stream` afterwards sees zeros, work on another stream must wait for `stream` first (a
  // synchronisation here cost a request's start ~60 us of idle device). The handle keeps the stream alive.
  DeviceMemory(size_t bytes, std::shared_ptr<const cuda::Stream> stream, bool zero = false);
  // A non-owning view of part of another block (which must outlive it).
  static DeviceMemory view(void* p, size_t bytes) {
    DeviceMemory m;
    m.p_ = p;
    m.bytes_ = bytes;
    m.owned_ = false;
    return m;
  }
  ~DeviceMemory();
  DeviceMemory(DeviceMemory&& o) noexcept
      : p_(o.p_), bytes_(o.bytes_), owned_(o.owned_), stream_(std::move(o.stream_)) {
    o.p_ = nullptr;
    o.bytes_ = 0;
  }
  DeviceMemory& operator=(DeviceMemory&& o) noexcept;
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;

  void* get() const { return p_; }
  template <class T>
  T* as() const { return static_cast<T*>(p_); }
  size_t bytes() const { return bytes_; }

 private:
  void* p_ = nullptr;
  size_t bytes_ = 0;
  bool owned_ = true;
  std::shared_ptr<const cuda::Stream> stream_;  // null: a plain cudaMalloc block

  void release();
};

}  // namespace hypic
