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
// boxes (dk halves), zero beyond, by cp.async from NT threads (the caller commits and waits).
template <int NT>
__device__ __forceinline__ void load_sw(unsigned char* dst, const bf16* src, int64_t ld, int rows_valid) {
  static_assert(kC * 16 % NT == 0, "whole pieces a thread");
#pragma unroll
  for (int i = 0; i < kC * 16 / NT; ++i) {
    const int q = int(threadIdx.x) + i * NT, r = q / 16, pc = q % 16;
    const bool valid = r < rows_valid;
    cp_async16(dst + (pc / 8) * kSwBox + sw128(r, pc % 8), valid ? src + r * ld + pc * 8 : src, valid);
  }
}

}  // namespace hypic::cuda::gdn
