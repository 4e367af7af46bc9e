// The combine pass of the split-key attention forms (attention_decode, attention_prefill_split): each
// split wrote an unnormalised partial output and its (max, sum) of base-2 softmax terms; the pass merges
// them per (query row, head).
#pragma once
#include <cstdint>

#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/pdl_launch.cuh"
#include "kernels/cuda/types.h"

namespace hypic::cuda::detail {

// Block (row, column chunk of kCombineCols), row = query_row * Hq + head (static: each translation unit that
// launches it has its own):
//   part_o:  [rows, splits, ld] fp32 (the first d columns used);  part_ml: [rows, splits, 2] fp32 (max, sum;
//            a split that saw no key has max -inf);  out: [rows, d] bf16 (zero where no split saw a key).
// The splits' weights exp2(m_s - M) are formed once per block in shared memory (splits <=
// kCombineMaxSplits); then each column's splits are summed by kCombineGroups threads at once, each over its
// share with independent loads, and the shares added in shared memory. (One thread walking a decode row's
// 128 splits took a dependent load per split: 50 us per layer on the H200.)
constexpr int kCombineMaxSplits = 256, kCombineCols = 32, kCombineGroups = 8;
constexpr int kCombineThreads = kCombineCols * kCombineGroups;

inline dim3 split_combine_grid(int64_t rows, int64_t d) {
  return dim3(unsigned(rows), unsigned((d + kCombineCols - 1) / kCombineCols));
}

// kOneTrip (opt-in, HYPIC_CUDA_COMBINE_ONE_TRIP=1; on an H100 the batch-1 step unchanged, batch 8 0.7% slower):
// every load of a thread (its split's max and sum, its column's share of the partials) is issued before the first
// is used, so the block waits on L2 once instead of once for the maxima, once for the sums and three times for a
// decode row's 132 partials. The sums are the loops', in the same order.
template <bool kOneTrip>
static __global__ void __launch_bounds__(kCombineThreads)
    split_combine_kernel(int64_t splits, int64_t d, int64_t ld, const float* __restrict__ part_o,
                         const float* __restrict__ part_ml, bf16* __restrict__ out, bool early) {
  pdl_wait();  // programmatic launch in a decode step: the partials are the kernel before's
  if (early) pdl_trigger();
  __shared__ float wsp[kCombineMaxSplits];
  __shared__ float red[kCombineThreads / 32];
  __shared__ float part[kCombineGroups][kCombineCols];
  __shared__ float shared_m, shared_inv;
  const int64_t row = blockIdx.x;
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const float* ml = part_ml + row * splits * 2;
  const int cc = tid % kCombineCols, grp = tid / kCombineCols;
  const int64_t c = int64_t(blockIdx.y) * kCombineCols + cc;
  const float* po = part_o + row * splits * ld + (c < d ? c : 0);
  constexpr int kPer = kCombineMaxSplits / kCombineGroups;  // partials a thread sums at most
  float pv[kOneTrip ? kPer : 1];
  float m_own = -INFINITY, l_own = 0.0f;  // kOneTrip: split tid's (splits <= kCombineThreads)
  if constexpr (kOneTrip) {
    if (tid < splits) {
      m_own = ml[tid * 2];
      l_own = ml[tid * 2 + 1];
    }
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      const int64_t sp = grp + int64_t(j) * kCombineGroups;
      pv[j] = sp < splits ? po[sp * ld] : 0.0f;
    }
  }
  float m = -INFINITY;
  if constexpr (kOneTrip) {
    m = fmaxf(m, m_own);
  } else {
    for (int64_t sp = tid; sp < splits; sp += kCombineThreads) m = fmaxf(m, ml[sp * 2]);
  }
  m = warp_max(m);
  if (lane == 0) red[warp] = m;
  __syncthreads();
  if (tid == 0) {
    float M = red[0];
    for (int w = 1; w < kCombineThreads / 32; ++w) M = fmaxf(M, red[w]);
    shared_m = M;
  }
  __syncthreads();
  const float M = shared_m;
  float l = 0.0f;
  if constexpr (kOneTrip) {
    if (tid < splits) {
      const float w = m_own != -INFINITY ? exp2f(m_own - M) : 0.0f;
      wsp[tid] = w;
      l += w != 0.0f ? l_own * w : 0.0f;
    }
  } else {
    for (int64_t sp = tid; sp < splits; sp += kCombineThreads) {
      const float ms = ml[sp * 2];
      const float w = ms != -INFINITY ? exp2f(ms - M) : 0.0f;
      wsp[sp] = w;
      l += w != 0.0f ? ml[sp * 2 + 1] * w : 0.0f;
    }
  }
  l = warp_sum(l);
  __syncthreads();  // every wsp written, red free again
  if (lane == 0) red[warp] = l;
  __syncthreads();
  if (tid == 0) {
    float L = 0.0f;
    for (int w = 0; w < kCombineThreads / 32; ++w) L += red[w];
    shared_inv = L > 0.0f ? 1.0f / L : 0.0f;
  }
  float o = 0.0f;
  if constexpr (kOneTrip) {
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      const int64_t sp = grp + int64_t(j) * kCombineGroups;
      if (sp < splits) {
        const float w = wsp[sp];
        o = w != 0.0f ? fmaf(pv[j], w, o) : o;  // a split that saw no key may hold anything
      }
    }
  } else {
#pragma unroll 8
    for (int64_t sp = grp; sp < splits; sp += kCombineGroups) {
      const float w = wsp[sp], p = po[sp * ld];
      o = w != 0.0f ? fmaf(p, w, o) : o;  // a split that saw no key may hold anything
    }
  }
  part[grp][cc] = o;
  __syncthreads();
  if (grp == 0 && c < d) {
    float sum = 0.0f;
#pragma unroll
    for (int g = 0; g < kCombineGroups; ++g) sum += part[g][cc];
    out[row * d + c] = __float2bfloat16_rn(sum * shared_inv);
  }
}

// The same for at most 32 splits (a stitch's split prefill: a few per row): the first warp forms the
// weights, then every thread sums one column over the splits. Block (row, chunk of kCombineFewCols columns).
// (The kernel above gave each of its 8 column chunks a block that redid the row's weights and left most of
// its groups idle: 51 us per layer for 2528 rows of 6 splits.)
constexpr int kCombineFewSplits = 32, kCombineFewCols = 256;

static __global__ void __launch_bounds__(kCombineFewCols)
    split_combine_few_kernel(int64_t splits, int64_t d, int64_t ld, const float* __restrict__ part_o,
                             const float* __restrict__ part_ml, bf16* __restrict__ out, bool early) {
  pdl_wait();  // as above
  if (early) pdl_trigger();
  __shared__ float wsp[kCombineFewSplits];
  __shared__ float shared_inv;
  const int64_t row = blockIdx.x;
  const int tid = threadIdx.x;
  if (tid < 32) {
    const float* ml = part_ml + row * splits * 2;
    const float ms = tid < splits ? ml[tid * 2] : -INFINITY;
    const float M = warp_max(ms);
    const float w = ms != -INFINITY ? exp2f(ms - M) : 0.0f;
    const float l = warp_sum(w != 0.0f ? ml[tid * 2 + 1] * w : 0.0f);
    if (tid < splits) wsp[tid] = w;
    if (tid == 0) shared_inv = l > 0.0f ? 1.0f / l : 0.0f;
  }
  __syncthreads();
  const int64_t c = int64_t(blockIdx.y) * kCombineFewCols + tid;
  if (c >= d) return;
  const float* po = part_o + row * splits * ld + c;
  float o = 0.0f;
  for (int64_t sp = 0; sp < splits; ++sp) {
    const float w = wsp[sp];
    o = w != 0.0f ? fmaf(po[sp * ld], w, o) : o;  // a split that saw no key may hold anything
  }
  out[row * d + c] = __float2bfloat16_rn(o * shared_inv);
}

// Merges `splits` partial results for `rows` rows of d columns (layouts as above) with the kernel that
// suits the split count; `pdl`: launched programmatically (pdl_launch.cuh), and letting its successor start
// early when its grid fits in one wave.
inline void split_combine(int64_t splits, int64_t rows, int64_t d, int64_t ld, const float* part_o,
                          const float* part_ml, bf16* out, cudaStream_t stream, bool pdl = false) {
  if (splits <= kCombineFewSplits) {
    const dim3 grid(unsigned(rows), unsigned((d + kCombineFewCols - 1) / kCombineFewCols));
    launch_pdl(pdl, split_combine_few_kernel, grid, dim3(kCombineFewCols), 0, stream, splits, d, ld, part_o, part_ml,
               out, pdl && pdl_trigger_early(int64_t(grid.x) * grid.y));
  } else {
    const dim3 grid = split_combine_grid(rows, d);
    const bool one_trip = env_is("HYPIC_CUDA_COMBINE_ONE_TRIP", "1");
    launch_pdl(pdl, one_trip ? split_combine_kernel<true> : split_combine_kernel<false>, grid, dim3(kCombineThreads), 0,
               stream, splits, d, ld, part_o, part_ml, out, pdl && pdl_trigger_early(int64_t(grid.x) * grid.y));
  }
}

}  // namespace hypic::cuda::detail
