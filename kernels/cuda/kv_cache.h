// Appending rows to a device KV cache at an offset held on the device, so the step that writes them can
// be captured once in a CUDA graph and replayed while the cache fills (the host only updates the count).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/types.h"

namespace hypic::cuda {

// With r0 = *rows_end - T (device int32, the row count after the append):
//   k_cache[r0 + t, :] = k_new[t, :], v_cache[r0 + t, :] = v_new[t, :], pos_cache[r0 + t] = pos_new[t]
//   k_new, v_new: [T, row] bf16; pos_new: [T] int64; caches: [capacity, row] bf16 and [capacity] int64.
// Rows that would land outside [0, capacity) are dropped (the host sizes the cache before the step).
void kv_append(const bf16* k_new, const bf16* v_new, const int64_t* pos_new, int64_t T, int64_t row,
               const int32_t* rows_end, int64_t capacity, bf16* k_cache, bf16* v_cache, int64_t* pos_cache,
               cudaStream_t stream);

// One sequence's KV cache as the batched decode kernels see it (a device array of these, one per
// sequence, so one launch serves sequences whose caches live in separate buffers).
//   k, v: [capacity, row] bf16; pos: [capacity] int64; rows: the row count after this step's append
//   (the new row is rows - 1; the step's keys are rows [0, rows)).
struct KvSlot {
  bf16* k;
  bf16* v;
  int64_t* pos;
  int32_t rows;
  int32_t capacity;
};

// One new row per sequence: for i < N, with r = slots[i].rows - 1 (dropped unless 0 <= r < capacity),
//   slots[i].k[r, :] = k_new[i, :], slots[i].v[r, :] = v_new[i, :], slots[i].pos[r] = pos_new[i].
//   k_new, v_new: [N, row] bf16 (16-byte aligned rows when row % 8 == 0); pos_new: [N] int64;
//   slots: [N] on the device.
void kv_append_batched(const bf16* k_new, const bf16* v_new, const int64_t* pos_new, int64_t N, int64_t row,
                       const KvSlot* slots, cudaStream_t stream);

}  // namespace hypic::cuda
