// Rotary position embedding, NeoX "rotate_half" form on the first rot_dim dims of each head:
// pairs (d, d + rot_dim/2) for d < rot_dim/2 are rotated by angle pos * theta^(-2d/rot_dim).
#pragma once
#include <cstdint>

namespace hypic::cpu {

// x: [rows, heads, head_dim], rotated in place; positions: [rows] absolute positions.
void rope_apply(float* x, int64_t rows, int64_t heads, int64_t head_dim, int64_t rot_dim,
                const int64_t* positions, double theta);

// Moves already-rotated vectors by `delta` positions (R(a+b) = R(b) R(a)): x as in rope_apply,
// every row shifted by the same delta. Used to re-rotate cached keys.
void rope_shift(float* x, int64_t rows, int64_t heads, int64_t head_dim, int64_t rot_dim,
                int64_t delta, double theta);

// Re-rotates linear-attention states whose q/k carry RoPE (DESIGN §1.2, reference §6.3):
// state: [heads, dk, dv]; rows d and d + rot_dim/2 of every head are rotated by delta * inv_freq_d.
void rope_shift_state(float* state, int64_t heads, int64_t dk, int64_t dv, int64_t rot_dim,
                      int64_t delta, double theta);

}  // namespace hypic::cpu
