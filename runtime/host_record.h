// An encoded cache record (runtime/entry_codec.h) in host memory that the backend allocated
// (Backend::allocate_host: pinned on CUDA, so a promotion copies it to the device by asynchronous DMA).
// The host tier holds its records this way, and a record read from disk is read straight into one.
#pragma once
#include <cstddef>
#include <memory>
#include <string_view>

#include "runtime/backend.h"

namespace hypic {

class HostRecord {
 public:
  // `bytes` bytes of uninitialised host memory from `b`.
  HostRecord(Backend& b, size_t bytes) : mem_(b.allocate_host(bytes)), size_(bytes) {}
  // A copy of `record` in host memory from `b`.
  HostRecord(Backend& b, std::string_view record);

  char* data() { return static_cast<char*>(mem_->data()); }
  const char* data() const { return static_cast<const char*>(mem_->data()); }
  size_t size() const { return size_; }
  std::string_view view() const { return {data(), size_}; }

 private:
  std::unique_ptr<Memory> mem_;
  size_t size_;
};

}  // namespace hypic
