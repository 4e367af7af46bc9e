// Tile helpers shared by the Hopper GDN walks (gdn_state_sm90.cu, gdn_walk_rs_sm90.cu): SW128 boxes of the chunk's
// [64 rows][128 dk] bf16 matrices (see sm90.cuh for the layout wgmma reads) and bf16 pair packing.
#pragma once
#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/cuda/gdn_common.cuh"

namespace hypic::cuda::gdn {

constexpr int kSwBox = kC * 128;  // one SW128 box: 64 rows of 128 bytes (64 bf16)

// Byte offset of 16-byte piece p (0..7) of row r in an SW128 box.
__device__ __forceinline__ uint32_t sw128(int r, int p) { return uint32_t(r * 128 + ((p ^ (r & 7)) << 4)); }

__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

// Rows [0, rows_valid) of a [64][128] bf16 matrix (row stride ld elements, 16-byte aligned rows) into two SW128
// boxes (dk halves), zero beyond, by cp.async from NT threads (the caller commits and waits). Thread i copies piece
// i % 16 of rows i / 16 + (NT / 16) j: with NT a multiple of 128 the swizzle phase of its rows is the same, so each
// copy is one offset on from the last (where each copy's own 64-bit row index and swizzle took ~20 instructions).
template <int NT>
__device__ __forceinline__ void load_sw(unsigned char* dst, const bf16* src, int64_t ld, int rows_valid) {
  static_assert(NT % 128 == 0, "a thread keeps its piece and its rows' swizzle phase");
  constexpr int kStep = NT / 16;  // rows a step
  const int r0 = int(threadIdx.x) / 16, pc = int(threadIdx.x) % 16;
  unsigned char* d = dst + (pc / 8) * kSwBox + sw128(r0, pc % 8);
  const bf16* s = src + r0 * ld + pc * 8;
  const int64_t step = kStep * ld;
#pragma unroll
  for (int j = 0; j < kC / kStep; ++j, s += step) {
    const bool valid = r0 + kStep * j < rows_valid;
    cp_async16(d + j * kStep * 128, valid ? s : src, valid);
  }
}

}  // namespace hypic::cuda::gdn
