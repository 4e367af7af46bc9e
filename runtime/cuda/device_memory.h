// An owning handle of one plain cudaMalloc block, for memory that lives as long as a model or a sequence
// (weights, states). Per-call scratch comes from cuda::DevicePool instead.
#pragma once
#include <cstddef>
#include <cstdint>

namespace hypic {

class DeviceMemory {
 public:
  DeviceMemory() = default;
  // Allocates `bytes` (none for 0); zero-fills the block when `zero`. Throws cuda::CudaError.
  explicit DeviceMemory(size_t bytes, bool zero = false);
  // A non-owning view of part of another block (which must outlive it).
  static DeviceMemory view(void* p, size_t bytes) {
    DeviceMemory m;
    m.p_ = p;
    m.bytes_ = bytes;
    m.owned_ = false;
    return m;
  }
  ~DeviceMemory();
  DeviceMemory(DeviceMemory&& o) noexcept : p_(o.p_), bytes_(o.bytes_), owned_(o.owned_) {
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
};

}  // namespace hypic
