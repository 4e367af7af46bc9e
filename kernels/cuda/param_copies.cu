#include <algorithm>
#include <cstring>

#include "kernels/cuda/check.h"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/param_copies.h"
#include "kernels/cuda/pdl_launch.cuh"

namespace hypic::cuda {
namespace {

constexpr int kThreads = 256;

struct RegionList {
  CopyRegion r[kCopyRegionsPerLaunch];
};
static_assert(sizeof(RegionList) <= 4000, "the list and the count fit ordinary kernel parameters");

// Block (x, y) copies its stride of region y in the widest unit that src, dst and bytes all allow.
template <class U>
__device__ __forceinline__ void copy_units(const CopyRegion& c, int64_t units) {
  const U* s = static_cast<const U*>(c.src);
  U* d = static_cast<U*>(c.dst);
  for (int64_t i = int64_t(blockIdx.x) * kThreads + threadIdx.x; i < units; i += int64_t(gridDim.x) * kThreads)
    d[i] = s[i];
}

__global__ void __launch_bounds__(kThreads) copy_regions_kernel(const RegionList list) {
  detail::pdl_wait();
  const CopyRegion c = list.r[blockIdx.y];
  const uint64_t a = reinterpret_cast<uintptr_t>(c.src) | reinterpret_cast<uintptr_t>(c.dst) | uint64_t(c.bytes);
  if (a % 16 == 0) copy_units<uint4>(c, c.bytes / 16);
  else if (a % 8 == 0) copy_units<uint2>(c, c.bytes / 8);
  else if (a % 4 == 0) copy_units<uint32_t>(c, c.bytes / 4);
  else copy_units<unsigned char>(c, c.bytes);
}

template <int N>
struct Payload {
  alignas(16) unsigned char b[N];
};

template <int N>
__global__ void __launch_bounds__(kThreads) write_kernel(const Payload<N> p, unsigned char* dst, int bytes) {
  detail::pdl_wait();
  if (reinterpret_cast<uintptr_t>(dst) % 4 == 0) {
    const int words = bytes / 4;
    for (int i = threadIdx.x; i < words; i += kThreads)
      reinterpret_cast<uint32_t*>(dst)[i] = reinterpret_cast<const uint32_t*>(p.b)[i];
    for (int i = 4 * words + threadIdx.x; i < bytes; i += kThreads) dst[i] = p.b[i];
  } else {
    for (int i = threadIdx.x; i < bytes; i += kThreads) dst[i] = p.b[i];
  }
}

template <int N>
void write_as(void* dst, const void* src, size_t bytes, cudaStream_t stream) {
  Payload<N> p;
  std::memcpy(p.b, src, bytes);
  detail::launch_pdl(detail::pdl_chain_enabled(), write_kernel<N>, dim3(1), dim3(kThreads), 0, stream, p,
                     static_cast<unsigned char*>(dst), int(bytes));
  HYPIC_CUDA_LAUNCH_CHECK();
}

}  // namespace

void copy_regions(const CopyRegion* regions, int64_t n, cudaStream_t stream) {
  for (int64_t at = 0; at < n; at += kCopyRegionsPerLaunch) {
    const int m = int(std::min<int64_t>(kCopyRegionsPerLaunch, n - at));
    RegionList list{};
    int64_t most = 0;
    int used = 0;
    for (int i = 0; i < m; ++i) {
      const CopyRegion& c = regions[at + i];
      HYPIC_CUDA_REQUIRE(c.bytes >= 0 && (c.bytes == 0 || (c.src && c.dst)), "copy_regions: a region needs a source and a destination");
      if (c.bytes == 0) continue;
      list.r[used++] = c;
      most = std::max(most, c.bytes);
    }
    if (used == 0) continue;
    // Enough blocks that the largest region moves ~16 KB a block (in 16-byte units a thread, 4 rounds).
    const int64_t x = std::clamp<int64_t>((most + 16383) / 16384, 1, 1024);
    detail::launch_pdl(detail::pdl_chain_enabled(), copy_regions_kernel, dim3(unsigned(x), unsigned(used)),
                       dim3(kThreads), 0, stream, list);
    HYPIC_CUDA_LAUNCH_CHECK();
  }
}

void write_from_host(void* dst, const void* src, size_t bytes, cudaStream_t stream) {
  HYPIC_CUDA_REQUIRE(bytes <= kParamWriteMaxBytes, "write_from_host: at most 16 KB");
  if (bytes == 0) return;
  HYPIC_CUDA_REQUIRE(dst && src, "write_from_host: null pointer");
  if (bytes <= 1024) write_as<1024>(dst, src, bytes, stream);
  else if (bytes <= 4096) write_as<4096>(dst, src, bytes, stream);
  else write_as<kParamWriteMaxBytes>(dst, src, bytes, stream);
}

}  // namespace hypic::cuda
