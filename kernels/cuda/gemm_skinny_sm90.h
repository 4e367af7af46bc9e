// Products of a few hundred rows or fewer on Hopper: y = x W^T where x has M <= 256 rows and W is a weight
// matrix (kernels/cuda/gemm_skinny_sm90.cu). At these row counts a product is a stream over the weights,
// and cuBLAS's tiles leave most of the bandwidth unused (an all-hit stitch's 158-row projections ran at
// 1.3-1.7 TB/s); this kernel swaps the operands (the weights are wgmma's 64-row A side, the rows its
// N side, padded to a multiple of 16 or 32), splits K over the blocks of a cluster so that every SM streams,
// and sums the splits through distributed shared memory in a fixed order (the same bits on every run).
// It is launched programmatically (the weights' first stages load before the kernel waits for its
// predecessor).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/types.h"
#include "kernels/dtype.h"

namespace hypic::cuda {

// Whether the CUDA model sends its products of few rows here: yes unless HYPIC_CUDA_SKINNY=0 (cuBLAS then, for
// comparison). Read on every call, so that a bench can time both in one process.
bool gemm_skinny_enabled();

// The most rows for which the CUDA model prefers gemm_skinny to cuBLASLt. Measured on an H200
// (hypic_bench_kernels --only skinny, docs/benchmarks.md): up to 158 rows it is ahead on most of the 35B-A3B
// products alone and 1.4-4x ahead on the grouped ones; at 256 rows, where a product is no longer a pure
// stream over the weights (the rows' boxes are twice the weights'), cuBLASLt is 1.4-1.7x ahead.
constexpr int64_t kGemmSkinnyPreferredRows = 160;

// Whether gemm_skinny takes this problem: the current device is sm_90, 1 <= M <= 256, K % 8 == 0 and
// ldx % 8 == 0 (16-byte rows for the bulk copies), x and w 16-byte aligned, y aligned to its element, yt BF16
// (store only) or F32 (store or accumulate). Outputs with N % 4 == 0, ldy % 4 == 0 and y 16-byte aligned are
// written four columns a store, others (a one-column gate) element by element.
bool gemm_skinny_applies(const bf16* x, int64_t M, int64_t K, int64_t ldx, const bf16* w, int64_t N, const void* y,
                         DType yt, int64_t ldy, bool accumulate);

// y[m, n] = sum_k x[m, k] * w[n, k]  (+ y[m, n] when accumulate), fp32 accumulation:
//   x: [M, K] bf16, rows ldx elements apart;  w: [N, K] bf16, dense rows;  y: [M, N] of type yt, rows ldy apart.
// Throws UnsupportedShape where gemm_skinny_applies is false.
struct GemmSkinnyPlan;
void gemm_skinny(const bf16* x, int64_t M, int64_t K, int64_t ldx, const bf16* w, int64_t N, void* y, DType yt,
                 int64_t ldy, bool accumulate, cudaStream_t stream, const GemmSkinnyPlan* plan = nullptr);

// Several products of the same rows in one launch (a layer's input projections): up to
// kGemmSkinnyMaxTargets weight matrices, each with its own output, type and accumulate flag, the blocks of
// all of them in one grid. Each target as in gemm_skinny.
constexpr int kGemmSkinnyMaxTargets = 3;
struct GemmSkinnyTarget {
  const bf16* w;  // [N, K] bf16, dense rows
  int64_t N;
  void* y;  // [M, N] of type yt, rows ldy apart
  DType yt;
  int64_t ldy;
  bool accumulate;
};
bool gemm_skinny_applies_many(const bf16* x, int64_t M, int64_t K, int64_t ldx, const GemmSkinnyTarget* targets,
                              int n);
void gemm_skinny_many(const bf16* x, int64_t M, int64_t K, int64_t ldx, const GemmSkinnyTarget* targets, int n,
                      cudaStream_t stream, const GemmSkinnyPlan* plan = nullptr);

// How gemm_skinny splits a problem (host arithmetic, exposed for the tests and benches): the rows padded to
// the wgmma width (16, 32, 64, 96, 128, 160, 192 or 256), blocks of block_cols output columns (128 or 256
// weight rows), `tiles` of them across N, each K cut into `splits` slices of k_steps 64-wide steps (the
// last one possibly shorter, none empty); splits <= 8 (a portable cluster). gemm_skinny chooses one itself;
// a plan passed to it (the bench's sweep) must come from gemm_skinny_plan for the same M, N and K, with
// block_cols (0: chosen; 128 or 256) and max_splits (1..8) forcing its width and capping its split.
struct GemmSkinnyPlan {
  int rows_padded, block_cols, tiles, splits, k_steps;
};
GemmSkinnyPlan gemm_skinny_plan(int64_t M, int64_t N, int64_t K, int sms, int block_cols = 0, int max_splits = 8);
// The same for gemm_skinny_many's targets of Ns[0 .. n) columns (tiles counts all of theirs).
GemmSkinnyPlan gemm_skinny_plan_many(int64_t M, const int64_t* Ns, int n, int64_t K, int sms, int block_cols = 0,
                                     int max_splits = 8);

}  // namespace hypic::cuda
