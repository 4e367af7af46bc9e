// The copies that travel in a launch's parameters (kernels/cuda/param_copies.h), the upload ring that uses
// them for small uploads, and the pool's reuse of a larger cached block (kernels/cuda/memory.h), against
// bytes written and read on the host.
#include <cstdint>
#include <cstring>
#include <numeric>
#include <vector>

#include "kernels/cuda/param_copies.h"
#include "tests/kernels/cuda/harness.h"

namespace hypic::cuda::test {
namespace {

std::vector<uint8_t> pattern(size_t n, uint32_t seed) {
  std::vector<uint8_t> v(n);
  uint32_t x = seed * 2654435761u + 1;
  for (auto& b : v) {
    x = x * 1664525u + 1013904223u;
    b = static_cast<uint8_t>(x >> 24);
  }
  return v;
}

TEST_F(CudaOps, CopyRegionsMovesEveryRegionAtAnyAlignment) {
  Stream st;
  const size_t total = size_t{4} << 20;
  DevArray<uint8_t> src(pool, pattern(total, 1));
  DevArray<uint8_t> dst(pool, std::vector<uint8_t>(total, 0xee));
  // 16-, 8-, 4- and 1-byte aligned regions, an empty one, one large region, and more regions than one launch
  // takes (so the copy splits into launches).
  std::vector<CopyRegion> regions;
  std::vector<std::pair<size_t, size_t>> spans;  // (offset, bytes), same offset at both ends
  size_t at = 0;
  auto add = [&](size_t skew, size_t bytes) {
    at += skew;
    regions.push_back({src.get() + at, dst.get() + at, static_cast<int64_t>(bytes)});
    spans.push_back({at, bytes});
    at += bytes + 64;
  };
  add(0, 1024 * 1024 + 16);
  add(8, 4104);
  add(4, 1028);
  add(1, 999);
  add(0, 0);
  for (int i = 0; i < kCopyRegionsPerLaunch + 37; ++i) add(i % 3, 100 + 16 * i);
  ASSERT_LT(at, total);
  copy_regions(regions.data(), static_cast<int64_t>(regions.size()), st);
  st.synchronize();
  const std::vector<uint8_t> s = src.download(), d = dst.download();
  std::vector<bool> covered(total, false);
  for (auto [o, n] : spans) {
    EXPECT_EQ(0, std::memcmp(s.data() + o, d.data() + o, n)) << "region at " << o << " of " << n << " bytes";
    for (size_t i = o; i < o + n; ++i) covered[i] = true;
  }
  size_t touched = 0;
  for (size_t i = 0; i < total; ++i) touched += !covered[i] && d[i] != 0xee;
  EXPECT_EQ(touched, 0u) << "bytes written outside the regions";
}

TEST_F(CudaOps, WriteFromHostAndTheUploadRingDeliverTheBytesInStreamOrder) {
  Stream st;
  UploadRing ring(size_t{64} << 10);
  // Sizes in each parameter class, past the largest (through the pinned ring) and past the ring itself; an
  // unaligned destination; each upload overwritten by the next one at the same place, so that only stream
  // order gives the last one's bytes.
  for (const size_t n : {size_t{1}, size_t{13}, size_t{1024}, size_t{1027}, size_t{4096}, size_t{9000},
                         kParamWriteMaxBytes, kParamWriteMaxBytes + 8, size_t{40000}, size_t{100000}}) {
    for (const size_t skew : {size_t{0}, size_t{3}}) {
      DevArray<uint8_t> dst(pool, std::vector<uint8_t>(n + skew + 16, 0));
      std::vector<uint8_t> last;
      for (uint32_t round = 0; round < 3; ++round) {
        last = pattern(n, 100 * round + static_cast<uint32_t>(n + skew));
        std::vector<uint8_t> host = last;
        if (n <= kParamWriteMaxBytes && round == 0)
          write_from_host(dst.get() + skew, host.data(), n, st);
        else
          ring.upload(dst.get() + skew, host.data(), n, st);
        std::fill(host.begin(), host.end(), 0x55);  // the source may be reused at once
      }
      st.synchronize();
      const std::vector<uint8_t> d = dst.download();
      EXPECT_EQ(0, std::memcmp(d.data() + skew, last.data(), n)) << n << " bytes at offset " << skew;
      for (size_t i = 0; i < skew; ++i) EXPECT_EQ(d[i], 0) << "byte before the destination";
      for (size_t i = skew + n; i < d.size(); ++i) EXPECT_EQ(d[i], 0) << "byte after the destination";
    }
  }
}

TEST_F(CudaOps, PoolServesFromACachedBlockWithinItsReuseLimit) {
  DevicePool p;
  const size_t MiB = size_t{1} << 20;
  void* big = p.allocate(MiB);
  p.deallocate(big);
  void* smaller = p.allocate(300 << 10);  // a third of it, within the 64 MiB slack: the cached block
  EXPECT_EQ(smaller, big);
  EXPECT_EQ(p.bytes_in_use(), DevicePool::size_class(MiB));
  EXPECT_EQ(p.bytes_cached(), 0u);
  p.deallocate(smaller);
  void* huge = p.allocate(256 * MiB);
  p.deallocate(huge);
  void* half = p.allocate(150 * MiB);  // within twice its size: the 256 MiB block
  EXPECT_EQ(half, huge);
  p.deallocate(half);
  void* quarter = p.allocate(64 * MiB);  // 256 MiB is past max(2 x 64, 64 + 64): a block of its own
  EXPECT_NE(quarter, huge);
  EXPECT_NE(quarter, big);
  EXPECT_EQ(p.bytes_in_use(), DevicePool::size_class(64 * MiB));
  void* small = p.allocate(512 << 10);  // the smallest cached block that serves: 1 MiB, not 256
  EXPECT_EQ(small, big);
  p.deallocate(small);
  p.deallocate(quarter);
  EXPECT_EQ(DevicePool::reuse_limit(MiB), MiB + DevicePool::kReuseSlack);
  EXPECT_EQ(DevicePool::reuse_limit(256 * MiB), 512 * MiB);
}

}  // namespace
}  // namespace hypic::cuda::test
