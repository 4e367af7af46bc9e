// Helpers of the CPU-vs-CUDA op harness: device arrays, bf16 rounding, the skip-without-GPU fixture.
#pragma once
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <vector>

#include "kernels/cuda/check.h"
#include "kernels/cuda/memory.h"
#include "kernels/cuda/types.h"
#include "kernels/dtype.h"
#include "tests/kernels/test_util.h"

namespace hypic::cuda::test {

// A measured error, logged next to its limit so that a run shows how much slack each bound has.
inline double logged_error(double err, double limit, const char* file, int line) {
  std::printf("[ metrics  ] %s:%d error %.3g limit %.3g (%.1fx)\n", file, line, err, limit,
              limit / (err > 1e-30 ? err : 1e-30));
  return err;
}
// EXPECT_LT(err, limit) that also logs both (takes `<< message` like EXPECT_LT).
#define HYPIC_EXPECT_ERR_LT(err, limit) \
  EXPECT_LT(::hypic::cuda::test::logged_error((err), (limit), __FILE__, __LINE__), (limit))

// Every test skips (CI has no GPU) unless a device answers.
class CudaOps : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!device_available()) GTEST_SKIP() << "no CUDA device";
  }
  DevicePool pool;
};

// cudaMemcpy from pageable host memory may return before its DMA lands, and device-to-device copies return at
// once; the ops under test run on non-blocking streams, which the legacy stream does not order. So every copy
// into a device array waits for the device before the test launches on it.
inline void copy_to_device(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind = cudaMemcpyHostToDevice) {
  HYPIC_CUDA_CHECK(cudaMemcpy(dst, src, bytes, kind));
  HYPIC_CUDA_CHECK(cudaDeviceSynchronize());
}

template <class T>
struct DevArray {
  DeviceBuffer buf;
  size_t n = 0;
  DevArray(DevicePool& pool, size_t count) : buf(pool, sizeof(T) * (count ? count : 1)), n(count) {}
  DevArray(DevicePool& pool, const std::vector<T>& host) : DevArray(pool, host.size()) { upload(host); }
  T* get() const { return buf.as<T>(); }
  void upload(const std::vector<T>& host) {
    copy_to_device(get(), host.data(), sizeof(T) * host.size());
  }
  std::vector<T> download() const {
    std::vector<T> h(n);
    HYPIC_CUDA_CHECK(cudaDeviceSynchronize());
    HYPIC_CUDA_CHECK(cudaMemcpy(h.data(), get(), sizeof(T) * n, cudaMemcpyDeviceToHost));
    return h;
  }
};

// Rounds in place to bf16 precision (the CPU reference then sees exactly the device's inputs).
inline void round_bf16(std::vector<float>& v) {
  for (auto& x : v) x = bf16_to_f32(f32_to_bf16(x));
}

// Seeded normal values already rounded to bf16 (what a device buffer of them holds).
inline std::vector<float> randn_bf16(size_t n, uint32_t seed, float scale = 1.0f) {
  auto v = hypic::test::randn(n, seed, scale);
  round_bf16(v);
  return v;
}

// A bf16 device copy of fp32 host data (rounded to nearest even).
inline DevArray<bf16> to_device_bf16(DevicePool& pool, const std::vector<float>& v) {
  std::vector<uint16_t> h(v.size());
  for (size_t i = 0; i < v.size(); ++i) h[i] = f32_to_bf16(v[i]);
  DevArray<bf16> d(pool, v.size());
  copy_to_device(d.get(), h.data(), 2 * h.size());
  return d;
}

inline std::vector<float> from_device_bf16(const DevArray<bf16>& d) {
  std::vector<uint16_t> h(d.n);
  HYPIC_CUDA_CHECK(cudaDeviceSynchronize());
  HYPIC_CUDA_CHECK(cudaMemcpy(h.data(), d.get(), 2 * h.size(), cudaMemcpyDeviceToHost));
  std::vector<float> f(h.size());
  for (size_t i = 0; i < h.size(); ++i) f[i] = bf16_to_f32(h[i]);
  return f;
}

}  // namespace hypic::cuda::test
