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

__global__ void kv_append_batched_kernel(const bf16* __restrict__ k_new, const bf16* __restrict__ v_new,
                                         const int64_t* __restrict__ pos_new, int64_t row,
                                         const KvSlot* __restrict__ slots) {
  const int64_t i = blockIdx.x;
  const KvSlot s = slots[i];
  const int64_t r = int64_t(s.rows) - 1;
  if (r < 0 || r >= s.capacity) return;
  if (threadIdx.x == 0) s.pos[r] = pos_new[i];
  if (row % 8 == 0) {
    const uint4* ks = reinterpret_cast<const uint4*>(k_new + i * row);
    const uint4* vs = reinterpret_cast<const uint4*>(v_new + i * row);
    uint4* kd = reinterpret_cast<uint4*>(s.k + r * row);
    uint4* vd = reinterpret_cast<uint4*>(s.v + r * row);
    for (int64_t j = threadIdx.x; j < row / 8; j += blockDim.x) {
      kd[j] = ks[j];
      vd[j] = vs[j];
    }
  } else {
    for (int64_t j = threadIdx.x; j < row; j += blockDim.x) {
      s.k[r * row + j] = k_new[i * row + j];
      s.v[r * row + j] = v_new[i * row + j];
    }
  }
}

}  // namespace

void kv_append_batched(const bf16* k_new, const bf16* v_new, const int64_t* pos_new, int64_t N, int64_t row,
                       const KvSlot* slots, cudaStream_t stream) {
  if (N <= 0) return;
  HYPIC_CUDA_REQUIRE(row > 0 && N <= 2147483647, "kv_append_batched: bad shape");
  HYPIC_CUDA_REQUIRE(row % 8 != 0 || ((reinterpret_cast<uintptr_t>(k_new) | reinterpret_cast<uintptr_t>(v_new)) & 15) == 0,
                     "kv_append_batched: rows of 8k elements need 16-byte aligned buffers");
  kv_append_batched_kernel<<<unsigned(N), 128, 0, stream>>>(k_new, v_new, pos_new, row, slots);
  HYPIC_CUDA_LAUNCH_CHECK();
}

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
