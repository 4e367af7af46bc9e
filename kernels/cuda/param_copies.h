// Device copies whose description travels in the kernel's parameters instead of through an upload: a
// list of (source, destination, bytes) regions copied in one launch, and a few host bytes written to the
// device. A host-to-device copy on a stream costs the copy engine's start (several microseconds either side
// of it on the H200); a launch's parameters ride with the launch.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace hypic::cuda {

// bytes from src to dst, both device memory (any alignment; 16-byte aligned regions copy fastest). Regions
// must not overlap one another's destinations, nor a destination a source.
struct CopyRegion {
  const void* src = nullptr;
  void* dst = nullptr;
  int64_t bytes = 0;
};

// Regions per launch (their descriptions fill the 4 KB of ordinary kernel parameters).
constexpr int kCopyRegionsPerLaunch = 160;

// Copies regions[0..n) (host array) on `stream`: one launch per kCopyRegionsPerLaunch regions.
void copy_regions(const CopyRegion* regions, int64_t n, cudaStream_t stream);

// The most bytes write_from_host takes (a launch's parameters can hold up to 32 KB on sm_70+).
constexpr size_t kParamWriteMaxBytes = 16384;

// Writes `bytes` bytes of host memory at `src` (read before this returns) to device memory at `dst`, in
// stream order, as the parameters of one launch. bytes <= kParamWriteMaxBytes.
void write_from_host(void* dst, const void* src, size_t bytes, cudaStream_t stream);

}  // namespace hypic::cuda
