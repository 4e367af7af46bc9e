#include "kernels/cuda/check.h"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/kv_cache.h"

namespace hypic::cuda {
namespace {

// One block per new row; 16-byte copies when the row allows.
__global__ void kv_append_kernel(const bf16* __restrict__ k_new, const bf16* __restrict__ v_new,
                                 const int64_t* __restrict__ pos_new, int64_t T, int64_t row,
                                 const int32_t* __restrict__ rows_end, int64_t capacity, bf16* __restrict__ k_cache,
                                 bf16* __restrict__ v_cache, int64_t* __restrict__ pos_cache) {
  const int64_t t = blockIdx.x, r = int64_t(*rows_end) - T + t;
  if (r < 0 || r >= capacity) return;
  if (threadIdx.x == 0) pos_cache[r] = pos_new[t];
  if (row % 8 == 0) {
    const uint4* ks = reinterpret_cast<const uint4*>(k_new + t * row);
    const uint4* vs = reinterpret_cast<const uint4*>(v_new + t * row);
    uint4* kd = reinterpret_cast<uint4*>(k_cache + r * row);
    uint4* vd = reinterpret_cast<uint4*>(v_cache + r * row);
    for (int64_t i = threadIdx.x; i < row / 8; i += blockDim.x) {
      kd[i] = ks[i];
      vd[i] = vs[i];
    }
  } else {
    for (int64_t i = threadIdx.x; i < row; i += blockDim.x) {
      k_cache[r * row + i] = k_new[t * row + i];
      v_cache[r * row + i] = v_new[t * row + i];
    }
  }
}

}  // namespace

void kv_append(const bf16* k_new, const bf16* v_new, const int64_t* pos_new, int64_t T, int64_t row,
               const int32_t* rows_end, int64_t capacity, bf16* k_cache, bf16* v_cache, int64_t* pos_cache,
               cudaStream_t stream) {
  if (T <= 0) return;
  HYPIC_CUDA_REQUIRE(row > 0 && T <= 2147483647, "kv_append: bad shape");
  const bool aligned = ((reinterpret_cast<uintptr_t>(k_new) | reinterpret_cast<uintptr_t>(v_new) |
                         reinterpret_cast<uintptr_t>(k_cache) | reinterpret_cast<uintptr_t>(v_cache)) & 15) == 0;
  HYPIC_CUDA_REQUIRE(aligned || row % 8 != 0, "kv_append: rows of 8k elements need 16-byte aligned buffers");
  kv_append_kernel<<<unsigned(T), 128, 0, stream>>>(k_new, v_new, pos_new, T, row, rows_end, capacity, k_cache, v_cache,
                                                    pos_cache);
  HYPIC_CUDA_LAUNCH_CHECK();
}

}  // namespace hypic::cuda
