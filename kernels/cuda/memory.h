// Device memory and stream/event handles for the CUDA backend.
//   DevicePool: a caching allocator over plain cudaMalloc (never managed memory). Freed blocks go back to
//     a per-size free list and are reused; trim() returns them to the driver. Thread-safe.
//   DeviceBuffer: owning handle of one pool block (move-only), returned to its pool on destruction.
//   Stream / Event: RAII wrappers; Event::elapsed_ms times work between two recorded events.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <vector>

namespace hypic::cuda {

// Gives the unused memory of the current device's default memory pool (stream-ordered allocations that
// were freed: sequence states, cache entries) back to the driver, so that a plain cudaMalloc can have it.
void trim_device_pool();

class DevicePool {
 public:
  DevicePool() = default;
  ~DevicePool();
  DevicePool(const DevicePool&) = delete;
  DevicePool& operator=(const DevicePool&) = delete;

  // A block of at least `bytes` bytes (256-byte aligned). Sizes are rounded up to a size class so that
  // blocks of similar size are reused; the smallest cached block up to reuse_limit(class) serves too.
  // Throws CudaError when the device is out of memory even after the free lists were returned to the
  // driver. HYPIC_CUDA_POOL_LOG=1 prints every driver allocation (a miss) to stderr.
  void* allocate(size_t bytes);
  // Returns a block obtained from allocate() to the free list (no driver call).
  void deallocate(void* p);
  // Frees every cached (not in use) block with cudaFree.
  void trim();

  size_t bytes_in_use() const;
  size_t bytes_cached() const;

  // The size class a request of `bytes` is served from.
  static size_t size_class(size_t bytes);
  // The largest cached block a request of class `cls` takes: twice the class, or the class plus
  // kReuseSlack, whichever is larger (small scratch may sit in a block a few MB larger; a large request
  // does not take a block many times its size).
  static constexpr size_t kReuseSlack = size_t{64} << 20;
  static size_t reuse_limit(size_t cls);

 private:
  mutable std::mutex mu_;
  std::map<size_t, std::vector<void*>> free_;  // size class -> cached blocks
  std::map<void*, size_t> live_;                // block -> size class
  size_t in_use_ = 0, cached_ = 0;
};

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(DevicePool& pool, size_t bytes) : pool_(&pool), p_(pool.allocate(bytes)), bytes_(bytes) {}
  ~DeviceBuffer() { reset(); }
  DeviceBuffer(DeviceBuffer&& o) noexcept : pool_(o.pool_), p_(o.p_), bytes_(o.bytes_) { o.p_ = nullptr; }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      reset();
      pool_ = o.pool_;
      p_ = o.p_;
      bytes_ = o.bytes_;
      o.p_ = nullptr;
    }
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void reset() {
    if (p_) pool_->deallocate(p_);
    p_ = nullptr;
  }
  void* get() const { return p_; }
  template <class T>
  T* as() const { return static_cast<T*>(p_); }
  size_t bytes() const { return bytes_; }

 private:
  DevicePool* pool_ = nullptr;
  void* p_ = nullptr;
  size_t bytes_ = 0;
};

class Stream {
 public:
  Stream();  // non-blocking stream (does not synchronise with the legacy default stream)
  ~Stream();
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  cudaStream_t get() const { return s_; }
  operator cudaStream_t() const { return s_; }
  void synchronize() const;

 private:
  cudaStream_t s_ = nullptr;
};

class Event {
 public:
  explicit Event(bool timing = true);
  ~Event();
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  cudaEvent_t get() const { return e_; }
  void record(cudaStream_t s);
  void synchronize() const;
  // Milliseconds between `start` and this event (both recorded and complete).
  float elapsed_ms(const Event& start) const;

 private:
  cudaEvent_t e_ = nullptr;
};

// Small host-to-device uploads (offsets, pointer arrays). Up to kParamWriteMaxBytes (param_copies.h) they
// travel as a launch's parameters (a copy on the stream would cost the copy engine's start either side of
// it); larger ones through a pinned ring: a copy from pageable memory may wait for the stream to drain,
// which would stall the host once per call; from pinned memory it is queued like a kernel. The ring is
// reused from its start once full, after a synchronisation of the stream of the last upload, so every
// upload must go to that one stream. Not thread-safe.
class UploadRing {
 public:
  explicit UploadRing(size_t bytes = size_t{1} << 20);
  ~UploadRing();
  UploadRing(const UploadRing&) = delete;
  UploadRing& operator=(const UploadRing&) = delete;
  // Queues a copy of `bytes` bytes from host `src` to device `dst` on `stream`.
  void upload(void* dst, const void* src, size_t bytes, cudaStream_t stream);

 private:
  char* host_ = nullptr;
  size_t cap_ = 0, at_ = 0;
  cudaStream_t last_ = nullptr;
};

}  // namespace hypic::cuda
