// Pinned (page-locked) host memory for the cache tiers below the device (docs/cache_tiers.md): host-tier
// records and records read from disk, which the device copies by DMA asynchronously. cudaHostAlloc maps
// and locks pages (milliseconds for a record of tens of MB) and cudaFreeHost synchronises the device, so
// freed blocks are kept by size class and reused, up to `keep_bytes` of them.
#pragma once
#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "runtime/backend.h"

namespace hypic {

class PinnedPool : public std::enable_shared_from_this<PinnedPool> {
 public:
  static std::shared_ptr<PinnedPool> create(size_t keep_bytes) {
    return std::shared_ptr<PinnedPool>(new PinnedPool(keep_bytes));
  }
  ~PinnedPool();
  // At least `bytes` bytes of pinned memory (contents undefined), given back to the pool when the handle
  // goes. Where the system refuses to pin more, ordinary memory (copies from it are then synchronous).
  std::unique_ptr<Memory> allocate(size_t bytes);

 private:
  explicit PinnedPool(size_t keep_bytes) : keep_(keep_bytes) {}
  friend class PinnedBlock;
  void give_back(void* p, size_t size_class);

  std::mutex mu_;
  std::map<size_t, std::vector<void*>> free_;  // size class -> blocks
  size_t cached_ = 0, keep_;
};

}  // namespace hypic
