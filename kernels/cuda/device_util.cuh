// Device-side helpers shared by the .cu files (not part of the public interface).
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace hypic::cuda::detail {

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Min / max of an int64 over the full warp (key and query positions): two warp reductions (redux.sync) of
// the 32-bit halves, the signed high word first and then the low word among the lanes that hold it, instead of
// ten dependent 32-bit shuffles.
__device__ __forceinline__ int64_t warp_min_i64(int64_t v) {
  const int hi = int(v >> 32);
  const int mh = __reduce_min_sync(0xffffffffu, hi);
  const unsigned ml = __reduce_min_sync(0xffffffffu, hi == mh ? unsigned(v) : 0xffffffffu);
  return int64_t((uint64_t(uint32_t(mh)) << 32) | ml);
}
__device__ __forceinline__ int64_t warp_max_i64(int64_t v) {
  const int hi = int(v >> 32);
  const int mh = __reduce_max_sync(0xffffffffu, hi);
  const unsigned ml = __reduce_max_sync(0xffffffffu, hi == mh ? unsigned(v) : 0u);
  return int64_t((uint64_t(uint32_t(mh)) << 32) | ml);
}

// 2^x by the special-function unit (flushes denormals): the attention kernels' softmax in base 2.
__device__ __forceinline__ float ex2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// acc + w . x over 8 bf16 pairs (one 16-byte load of each), fp32, pairs in order.
__device__ __forceinline__ float dot8_bf16(const uint4& w, const uint4& x, float acc) {
  const __nv_bfloat162* w2 = reinterpret_cast<const __nv_bfloat162*>(&w);
  const __nv_bfloat162* x2 = reinterpret_cast<const __nv_bfloat162*>(&x);
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const float2 a = __bfloat1622float2(w2[j]), b = __bfloat1622float2(x2[j]);
    acc = fmaf(a.x, b.x, fmaf(a.y, b.y, acc));
  }
  return acc;
}

// v rounded to bf16 and back: the value a bf16 buffer would hold.
__device__ __forceinline__ float round_bf16(float v) { return __bfloat162float(__float2bfloat16_rn(v)); }

__device__ __forceinline__ float to_f(float v) { return v; }
__device__ __forceinline__ float to_f(__nv_bfloat16 v) { return __bfloat162float(v); }

template <class T>
__device__ __forceinline__ T from_f(float v);
template <>
__device__ __forceinline__ float from_f<float>(float v) { return v; }
template <>
__device__ __forceinline__ __nv_bfloat16 from_f<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

// The hardware exp2 and reciprocal (a few ulp of fp32, far below the bf16 rounding of what reads them): the
// IEEE expf and division cost ~4x the instructions, which made the conv over 8192 channels compute-bound.
// For x < -88, exp(-x) is inf and both give 0 (-0 for silu), as the exact forms do.
__device__ __forceinline__ float silu_f(float x) { return __fdividef(x, 1.0f + __expf(-x)); }
__device__ __forceinline__ float sigmoid_f(float x) { return __fdividef(1.0f, 1.0f + __expf(-x)); }

// Eight bf16 x times the sigmoid of eight bf16 gates, one 16-byte word each (cuda::sigmoid_mul's math per
// element, shared with gemv's gated-attention input so both give the same bits).
__device__ __forceinline__ uint4 sigmoid_mul8(uint4 x, const uint4 gate) {
  __nv_bfloat16* xv = reinterpret_cast<__nv_bfloat16*>(&x);
  const __nv_bfloat16* gv = reinterpret_cast<const __nv_bfloat16*>(&gate);
#pragma unroll
  for (int j = 0; j < 8; ++j)
    xv[j] = __float2bfloat16_rn(__bfloat162float(xv[j]) * sigmoid_f(__bfloat162float(gv[j])));
  return x;
}

// Programmatic dependent launch (sm_90): a kernel launched with the programmatic-serialization attribute
// may start while its predecessor runs; it must call pdl_wait() before it reads anything the predecessor
// writes, or writes anything (work before it: only reads of constant data such as weights). A kernel calls
// pdl_trigger() to let such a successor start early (without it the successor starts at its end). Both
// are no-ops for kernels launched the ordinary way.
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
__device__ __forceinline__ void pdl_trigger() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;");
#endif
}

// Exclusive prefix sum of one count a thread over a block of kThreads threads (a whole number of warps, at most
// 1024; every thread calls it): warp scans by shuffles, then warp 0 scans the warps' totals. warp_total: shared
// memory for kThreads / 32 ints. Returns the sum over the threads before this one; *total gets the block's sum.
template <int kThreads>
__device__ __forceinline__ int block_exclusive_scan(int n, int* warp_total, int* total) {
  static_assert(kThreads % 32 == 0 && kThreads <= 1024, "whole warps, one warp's worth of warp totals");
  constexpr int kWarps = kThreads / 32;
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  int v = n;  // inclusive within the warp
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const int y = __shfl_up_sync(0xffffffffu, v, o);
    if (lane >= o) v += y;
  }
  if (lane == 31) warp_total[warp] = v;
  __syncthreads();
  if (warp == 0) {
    int t = lane < kWarps ? warp_total[lane] : 0;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const int y = __shfl_up_sync(0xffffffffu, t, o);
      if (lane >= o) t += y;
    }
    if (lane < kWarps) warp_total[lane] = t;  // inclusive over warps
  }
  __syncthreads();
  *total = warp_total[kWarps - 1];
  return v - n + (warp > 0 ? warp_total[warp - 1] : 0);
}

// 16 bytes of bf16 (8 values) as floats.
__device__ __forceinline__ void bf16x8_to_float(uint4 u, float (&out)[8]) {
  const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&u);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 f = __bfloat1622float2(h[i]);
    out[2 * i] = f.x;
    out[2 * i + 1] = f.y;
  }
}

inline unsigned blocks_for(int64_t n, int threads) { return static_cast<unsigned>((n + threads - 1) / threads); }

}  // namespace hypic::cuda::detail

namespace hypic::cuda::detail {

// Copies a [rows_valid, cols_valid] bf16 tile (row stride src_ld elements) into shared memory
// [rows_total, cols_total] (row stride dst_ld), zero-filling the rest. All threads of the block take part.
// 16-byte accesses when the columns and the source rows allow it.
__device__ __forceinline__ void load_tile_bf16(__nv_bfloat16* dst, int dst_ld, const __nv_bfloat16* src,
                                               int64_t src_ld, int rows_valid, int cols_valid, int rows_total,
                                               int cols_total) {
  const bool vec = (cols_valid % 8 == 0) && (src_ld % 8 == 0) && (dst_ld % 8 == 0) && (cols_total % 8 == 0) &&
                   ((reinterpret_cast<uintptr_t>(src) & 15) == 0);
  if (vec) {
    const int cv = cols_total / 8;
    for (int i = threadIdx.x; i < rows_total * cv; i += blockDim.x) {
      const int r = i / cv, c = (i % cv) * 8;
      uint4 val = make_uint4(0, 0, 0, 0);
      if (r < rows_valid && c < cols_valid) val = *reinterpret_cast<const uint4*>(src + r * src_ld + c);
      *reinterpret_cast<uint4*>(dst + r * dst_ld + c) = val;
    }
  } else {
    for (int i = threadIdx.x; i < rows_total * cols_total; i += blockDim.x) {
      const int r = i / cols_total, c = i % cols_total;
      dst[r * dst_ld + c] = (r < rows_valid && c < cols_valid) ? src[r * src_ld + c] : __float2bfloat16_rn(0.0f);
    }
  }
}

// Byte offset rounded up so that every shared-memory array starts 128-byte aligned (wmma needs 32).
__host__ __device__ constexpr size_t align128(size_t x) { return (x + 127) & ~size_t{127}; }

}  // namespace hypic::cuda::detail
