#include "kernels/cuda/memory.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "kernels/cuda/check.h"
#include "kernels/cuda/env_switch.h"
#include "kernels/cuda/param_copies.h"

namespace hypic::cuda {

void trim_device_pool() {
  int device = 0;
  cudaMemPool_t pool;
  if (cudaGetDevice(&device) == cudaSuccess && cudaDeviceGetDefaultMemPool(&pool, device) == cudaSuccess)
    (void)cudaMemPoolTrimTo(pool, 0);
  (void)cudaGetLastError();
}

size_t DevicePool::size_class(size_t bytes) {
  // Small blocks: multiples of 256 B up to 64 KiB. Larger: 8 classes per power of two (at most 12.5% waste).
  if (bytes == 0) bytes = 1;
  if (bytes <= (size_t{64} << 10)) return (bytes + 255) & ~size_t{255};
  size_t p = size_t{1} << (63 - __builtin_clzll(bytes));
  const size_t step = p / 8;
  return (bytes + step - 1) / step * step;
}

size_t DevicePool::reuse_limit(size_t cls) { return std::max(2 * cls, cls + kReuseSlack); }

DevicePool::~DevicePool() {
  trim();
  // Blocks still in use belong to live DeviceBuffers; free them so the pool never leaks device memory.
  for (auto& [p, sz] : live_) cudaFree(p);
}

void* DevicePool::allocate(size_t bytes) {
  const size_t cls = size_class(bytes);
  {
    // The smallest cached block of this class or larger, up to reuse_limit: a pass's scratch comes in
    // sizes that follow its row count, which changes from request to request (a few hundred rows after a
    // pass of thousands), and a driver allocation (~0.1 ms with its synchronisation, measured on an
    // all-hit stitch) per buffer per request costs more than the idle room of a larger cached block.
    std::lock_guard<std::mutex> g(mu_);
    for (auto it = free_.lower_bound(cls); it != free_.end() && it->first <= reuse_limit(cls); ++it) {
      if (it->second.empty()) continue;
      void* p = it->second.back();
      it->second.pop_back();
      cached_ -= it->first;
      in_use_ += it->first;
      live_[p] = it->first;
      return p;
    }
  }
  static const bool log = env_is("HYPIC_CUDA_POOL_LOG", "1");
  if (log) {
    std::lock_guard<std::mutex> g(mu_);
    size_t above = 0, n_above = 0;
    for (auto it = free_.lower_bound(cls); it != free_.end(); ++it)
      if (!it->second.empty()) {
        if (!above) above = it->first;
        n_above += it->second.size();
      }
    std::fprintf(stderr,
                 "[pool] miss %zu (class %zu): %zu cached blocks above, the smallest %zu; cached %zu in use %zu\n",
                 bytes, cls, n_above, above, cached_, in_use_);
  }
  void* p = nullptr;
  cudaError_t e = cudaMalloc(&p, cls);
  if (e == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    trim();  // give cached blocks back and try once more
    trim_device_pool();
    e = cudaMalloc(&p, cls);
  }
  if (e != cudaSuccess) throw_cuda_error(e, "cudaMalloc (DevicePool)", __FILE__, __LINE__);
  std::lock_guard<std::mutex> g(mu_);
  in_use_ += cls;
  live_[p] = cls;
  return p;
}

void DevicePool::deallocate(void* p) {
  if (!p) return;
  std::lock_guard<std::mutex> g(mu_);
  auto it = live_.find(p);
  if (it == live_.end()) throw CudaError("DevicePool::deallocate: pointer not from this pool");
  const size_t cls = it->second;
  live_.erase(it);
  in_use_ -= cls;
  cached_ += cls;
  free_[cls].push_back(p);
}

void DevicePool::trim() {
  std::lock_guard<std::mutex> g(mu_);
  for (auto& [cls, blocks] : free_)
    for (void* p : blocks) cudaFree(p);
  free_.clear();
  cached_ = 0;
}

size_t DevicePool::bytes_in_use() const {
  std::lock_guard<std::mutex> g(mu_);
  return in_use_;
}

size_t DevicePool::bytes_cached() const {
  std::lock_guard<std::mutex> g(mu_);
  return cached_;
}

Stream::Stream() { HYPIC_CUDA_CHECK(cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking)); }
Stream::~Stream() {
  if (s_) cudaStreamDestroy(s_);
}
void Stream::synchronize() const { HYPIC_CUDA_CHECK(cudaStreamSynchronize(s_)); }

Event::Event(bool timing) {
  HYPIC_CUDA_CHECK(cudaEventCreateWithFlags(&e_, timing ? cudaEventDefault : cudaEventDisableTiming));
}
Event::~Event() {
  if (e_) cudaEventDestroy(e_);
}
void Event::record(cudaStream_t s) { HYPIC_CUDA_CHECK(cudaEventRecord(e_, s)); }
void Event::synchronize() const { HYPIC_CUDA_CHECK(cudaEventSynchronize(e_)); }
float Event::elapsed_ms(const Event& start) const {
  float ms = 0;
  HYPIC_CUDA_CHECK(cudaEventElapsedTime(&ms, start.e_, e_));
  return ms;
}

UploadRing::UploadRing(size_t bytes) : cap_(bytes) {
  HYPIC_CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&host_), cap_));
}

UploadRing::~UploadRing() {
  if (host_) cudaFreeHost(host_);
}

void UploadRing::upload(void* dst, const void* src, size_t bytes, cudaStream_t stream) {
  if (bytes == 0) return;
  if (bytes <= kParamWriteMaxBytes) {  // in a launch's parameters: no copy engine start on the stream
    write_from_host(dst, src, bytes, stream);
    return;
  }
  if (bytes > cap_) {  // larger than the ring: a plain (possibly waiting) copy
    HYPIC_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream));
    return;
  }
  if (at_ + bytes > cap_ || (last_ && last_ != stream)) {
    // Earlier copies out of the ring must have run before it is overwritten.
    if (last_) HYPIC_CUDA_CHECK(cudaStreamSynchronize(last_));
    at_ = 0;
  }
  std::memcpy(host_ + at_, src, bytes);
  HYPIC_CUDA_CHECK(cudaMemcpyAsync(dst, host_ + at_, bytes, cudaMemcpyHostToDevice, stream));
  at_ = (at_ + bytes + 255) & ~size_t{255};
  last_ = stream;
}

}  // namespace hypic::cuda
