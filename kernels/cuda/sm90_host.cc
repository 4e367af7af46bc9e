#include "kernels/cuda/sm90_host.h"

#include <cudaTypedefs.h>

#include <atomic>
#include <string>

#include "kernels/cuda/check.h"

namespace hypic::cuda {
namespace {

PFN_cuTensorMapEncodeTiled_v12000 encode_fn() {
  static PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult q{};
    HYPIC_CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &q));
    HYPIC_CUDA_REQUIRE(q == cudaDriverEntryPointSuccess && p != nullptr, "the driver has no cuTensorMapEncodeTiled");
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(p);
  }();
  return fn;
}

}  // namespace

CUtensorMap tensor_map_sw128(const bf16* base, int64_t width, int64_t rows, uint32_t box_rows, const char* what) {
  return tensor_map_sw128(base, width, rows, width, box_rows, what);
}

CUtensorMap tensor_map_sw128(const bf16* base, int64_t width, int64_t rows, int64_t row_stride, uint32_t box_rows,
                             const char* what) {
  CUtensorMap m;
  const cuuint64_t dims[2] = {cuuint64_t(width), cuuint64_t(rows)};
  const cuuint64_t strides[1] = {cuuint64_t(row_stride) * sizeof(bf16)};
  const cuuint32_t box[2] = {64, box_rows}, elem[2] = {1, 1};
  const CUresult r = encode_fn()(&m, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, const_cast<bf16*>(base), dims, strides, box,
                                 elem, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                 CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  HYPIC_CUDA_REQUIRE(r == CUDA_SUCCESS, std::string(what) + ": cuTensorMapEncodeTiled failed");
  return m;
}

bool current_device_is_sm90() {
  // Asked before many launches (every product of a stitch may ask): the answer is kept per device.
  static std::atomic<int8_t> known[64] = {};
  int dev = 0, major = 0, minor = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return false;
  const bool cached = dev >= 0 && dev < 64;
  if (cached) {
    const int8_t v = known[dev].load(std::memory_order_relaxed);
    if (v != 0) return v > 0;
  }
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess)
    return false;
  const bool yes = major == 9 && minor == 0;
  if (cached) known[dev].store(yes ? 1 : -1, std::memory_order_relaxed);
  return yes;
}

}  // namespace hypic::cuda
