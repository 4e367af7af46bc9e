#include "runtime/cuda/pinned_memory.h"

#include <cuda_runtime.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <new>

#include "kernels/cuda/check.h"
#include "kernels/cuda/memory.h"

namespace hypic {

class PinnedBlock : public Memory {
 public:
  PinnedBlock(std::shared_ptr<PinnedPool> pool, void* p, size_t bytes, size_t size_class)
      : pool_(std::move(pool)), size_class_(size_class) {
    data_ = p;
    bytes_ = bytes;
  }
  ~PinnedBlock() override { pool_->give_back(data_, size_class_); }

 private:
  std::shared_ptr<PinnedPool> pool_;
  size_t size_class_;
};

namespace {

// Ordinary memory, where pinning was refused.
class PageableBlock : public Memory {
 public:
  explicit PageableBlock(size_t bytes) {
    if (bytes && !(data_ = std::malloc(bytes))) throw std::bad_alloc();
    bytes_ = bytes;
  }
  ~PageableBlock() override { std::free(data_); }
};

}  // namespace

PinnedPool::~PinnedPool() {
  for (auto& [size_class, blocks] : free_)
    for (void* p : blocks) cudaFreeHost(p);
}

std::unique_ptr<Memory> PinnedPool::allocate(size_t bytes) {
  const size_t size_class = cuda::DevicePool::size_class(bytes);  // the same classes: at most 12.5% waste
  void* p = nullptr;
  {
    std::lock_guard<std::mutex> g(mu_);
    if (auto it = free_.find(size_class); it != free_.end() && !it->second.empty()) {
      p = it->second.back();
      it->second.pop_back();
      cached_ -= size_class;
    }
  }
  if (!p && cudaHostAlloc(&p, size_class, cudaHostAllocDefault) != cudaSuccess) {
    cudaGetLastError();  // clear the error: the fallback below serves
    static std::atomic<bool> said{false};
    if (!said.exchange(true)) {
      std::fprintf(stderr, "hypic: could not pin %zu bytes of host memory for the cache; using ordinary memory "
                           "(host-tier hits copy synchronously)\n", size_class);
    }
    return std::make_unique<PageableBlock>(bytes);
  }
  return std::make_unique<PinnedBlock>(shared_from_this(), p, bytes, size_class);
}

void PinnedPool::give_back(void* p, size_t size_class) {
  {
    std::lock_guard<std::mutex> g(mu_);
    if (cached_ + size_class <= keep_) {
      free_[size_class].push_back(p);
      cached_ += size_class;
      return;
    }
  }
  cudaFreeHost(p);
}

}  // namespace hypic
