// Warp-level tensor-core primitives (mma.sync m16n8k16 bf16 and m16n8k8 tf32 -> fp32, ldmatrix) with the PTX fragment
// layouts spelled out, for kernels that keep accumulators in registers. Lane = 4 * g + t:
//   A (16 x 16, row): a[0] = (g, 2t..2t+1), a[1] = (g+8, 2t..), a[2] = (g, 2t+8..), a[3] = (g+8, 2t+8..)
//   B (16 x 8, k x n): b[0] = (k 2t..2t+1, n g), b[1] = (k 2t+8..2t+9, n g)
//   C (16 x 8, fp32):  c[0..1] = (g, 2t..2t+1), c[2..3] = (g+8, 2t..2t+1)
// Each 32-bit register holds two bf16, the lower column (or k) index in the low half.
#pragma once
#include <cuda_bf16.h>

#include <cstdint>

namespace hypic::cuda::detail {

__device__ __forceinline__ void mma_bf16_16816(float c[4], const uint32_t a[4], const uint32_t b[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// m16n8k8 tf32 -> fp32 (fp32 registers read as tf32: the low 13 mantissa bits are ignored). Fragments, lane
// = 4 * g + t: a[0] = (g, k t), a[1] = (g+8, t), a[2] = (g, t+4), a[3] = (g+8, t+4); b[0] = (k t, n g),
// b[1] = (t+4, g); c as for m16n8k16.
// Not volatile: it has no side effects, so the compiler may interleave independent products.
__device__ __forceinline__ void mma_tf32_1688(float c[4], const uint32_t a[4], const uint32_t b[2]) {
  asm(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// Four 8x8 b16 matrices, transposed on the way: lanes 8i..8i+7 give the row addresses of matrix i;
// r[i] receives (row 2t..2t+1, column g) of matrix i.
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t r[4], const void* smem_row) {
  const uint32_t addr = static_cast<uint32_t>(__cvta_generic_to_shared(smem_row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// Four 8x8 b16 matrices as stored (no transpose): lanes 8i..8i+7 give the row addresses of matrix i;
// r[i] receives (row g, columns 2t..2t+1) of matrix i. Feeds A fragments of a row-major tile, or B
// fragments of a tile stored n-major (row = n, column = k).
__device__ __forceinline__ void ldmatrix_x4(uint32_t r[4], const void* smem_row) {
  const uint32_t addr = static_cast<uint32_t>(__cvta_generic_to_shared(smem_row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// Asynchronous 16-byte global -> shared copy (sm_80+, bypasses L1 and registers). Only the first
// src_bytes (0 or 16) are read; the rest of the 16 bytes is zero-filled.
__device__ __forceinline__ void cp_async_16(void* smem, const void* gmem, int src_bytes) {
  const uint32_t addr = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(addr), "l"(gmem), "r"(src_bytes) : "memory");
}
// 4- or 8-byte copy through L1 (cp.async.cg takes only 16); src_bytes 0 zero-fills.
template <int Bytes>
__device__ __forceinline__ void cp_async_small(void* smem, const void* gmem, int src_bytes) {
  static_assert(Bytes == 4 || Bytes == 8, "cp.async.ca copies 4, 8 or 16 bytes");
  const uint32_t addr = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;\n" ::"r"(addr), "l"(gmem), "n"(Bytes), "r"(src_bytes)
               : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
// Waits until at most N of this thread's committed groups are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

__device__ __forceinline__ uint32_t ld_smem_u32(const __nv_bfloat16* p) { return *reinterpret_cast<const uint32_t*>(p); }

}  // namespace hypic::cuda::detail
