// Rotary position embedding on device (NeoX rotate_half form on the first rot_dim dims of each head),
// same math and rounding path as kernels/rope.h: inv_freq and shift angles are computed on the host
// exactly as the CPU reference does, and passed to the kernels.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/types.h"

namespace hypic::cuda {

// x: [rows, heads, head_dim] bf16, rotated in place; positions: [rows] int64 on the device.
// rot_dim even, <= head_dim, <= 256.
void rope_apply(bf16* x, int64_t rows, int64_t heads, int64_t head_dim, int64_t rot_dim, const int64_t* positions,
                double theta, cudaStream_t stream);

// Re-rotates cached keys by `delta` positions (R(a + delta) = R(delta) R(a)); x as in rope_apply.
void rope_shift(bf16* x, int64_t rows, int64_t heads, int64_t head_dim, int64_t rot_dim, int64_t delta, double theta,
                cudaStream_t stream);

// Re-rotates linear-attention states whose q/k carry RoPE: state [heads, dk, dv] fp32; rows d and
// d + rot_dim/2 of every head are rotated by delta * inv_freq_d.
void rope_shift_state(float* state, int64_t heads, int64_t dk, int64_t dv, int64_t rot_dim, int64_t delta,
                      double theta, cudaStream_t stream);

}  // namespace hypic::cuda
