// Rotary position embedding on device (NeoX rotate_half form on the first rot_dim dims of each head),
// same math and rounding path as kernels/rope.h: inv_freq and shift angles are computed on the host
// exactly as the CPU reference does, and passed to the kernels.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/kv_cache.h"
#include "kernels/cuda/types.h"

namespace hypic::cuda {

// x: [rows, heads, head_dim] bf16, rotated in place; positions: [rows] int64 on the device.
// rot_dim even, <= head_dim, <= 256.
void rope_apply(bf16* x, int64_t rows, int64_t heads, int64_t head_dim, int64_t rot_dim, const int64_t* positions,
                double theta, cudaStream_t stream);

// The attention inputs of T rows in one launch: query heads read from q_src (row t's head j at
// q_src + (t * H + j) * q_stride: 2 * head_dim where the projection interleaves each query with its gate),
// RMS-normed with q_norm and rotated as rope_apply does, written to q [T, H, head_dim]; the key heads k
// [T, Hkv, head_dim] normed with k_norm and rotated in place. Bit for bit cuda::rmsnorm then rope_apply
// (head_dim < 1024; q_norm / k_norm [head_dim] fp32, (1 + w) when zero_centred).
// With append (a decode step of T sequences, one row each): the keys go straight into the caches instead,
// with the values v_new [T, Hkv, head_dim] and the positions, as kv_append_batched(k, v_new, positions, T,
// Hkv * head_dim, slots) would put them after the plain call (k itself is then left as it was).
struct QkAppend {
  const bf16* v_new = nullptr;
  const KvSlot* slots = nullptr;  // [T] on the device
};
void qk_norm_rope(const bf16* q_src, int64_t q_stride, bf16* q, bf16* k, int64_t T, int64_t H, int64_t Hkv,
                  int64_t head_dim, const float* q_norm, const float* k_norm, float eps, bool zero_centred,
                  int64_t rot_dim, const int64_t* positions, double theta, cudaStream_t stream,
                  const QkAppend* append = nullptr);

// Re-rotates cached keys by `delta` positions (R(a + delta) = R(delta) R(a)); x as in rope_apply.
void rope_shift(bf16* x, int64_t rows, int64_t heads, int64_t head_dim, int64_t rot_dim, int64_t delta, double theta,
                cudaStream_t stream);

// Re-rotates linear-attention states whose q/k carry RoPE: state [heads, dk, dv] fp32; rows d and
// d + rot_dim/2 of every head are rotated by delta * inv_freq_d.
void rope_shift_state(float* state, int64_t heads, int64_t dk, int64_t dv, int64_t rot_dim, int64_t delta,
                      double theta, cudaStream_t stream);

// The cos/sin table rope_shift uses for `delta` (rot_dim / 2 values each), computed on the host.
void rope_shift_table(int64_t rot_dim, int64_t delta, double theta, float* cos_out, float* sin_out);
// The rotation's frequencies inv_freq_d = 1 / theta^(2d / rot_dim), d < rot_dim / 2, as every kernel here forms them
// (host; for kernels elsewhere that rotate as rope_apply does).
void rope_inv_freq(int64_t rot_dim, double theta, float* out);

// Several ranges of cached K/V rows appended to one cache in one launch (a stitch appends every cached
// block's body). Range i copies n rows from k/v (each [n, heads, head_dim] bf16) to rows [row, row + n) of
// K/V (each [rows, heads, head_dim] bf16), its keys re-rotated as rope_shift does with the table
// tables[i] = (cos [rot_dim / 2], sin [rot_dim / 2]) of rope_shift_table (identity when rotate is 0), and
// sets pos[row + j] = pos0 + j. ranges: [n_ranges] on the device, rows ascending and disjoint; tables:
// [n_ranges, 2, rot_dim / 2] fp32 on the device; total_rows: the sum of the ranges' n. rot_dim 0: keys
// without RoPE (Kimi's MLA), copied as they are whatever the rotate.
struct KvRange {
  const bf16* k;
  const bf16* v;
  int64_t pos0;
  int64_t row;
  int64_t n;
  int64_t rotate;
};
void kv_append_ranges(const KvRange* ranges, const float* tables, int64_t n_ranges, int64_t first_row,
                      int64_t total_rows, bf16* K, bf16* V, int64_t* pos, int64_t heads, int64_t head_dim,
                      int64_t rot_dim, cudaStream_t stream);

}  // namespace hypic::cuda
