// Normalisations on fp32 rows.
#pragma once
#include <cstdint>

namespace hypic::cpu {

// y[r, :] = x[r, :] / sqrt(mean(x[r, :]^2) + eps) * (zero_centred ? 1 + w : w)
// x, y: [rows, dim] (may alias); w: [dim] fp32.
void rmsnorm(const float* x, float* y, int64_t rows, int64_t dim, const float* w, float eps,
             bool zero_centred);

// Gated output norm of Gated DeltaNet: y = w * rmsnorm(o) * silu(z), per row of length dim.
// o, z, y: [rows, dim] (y may alias o); w: [dim].
void rmsnorm_gated_silu(const float* o, const float* z, float* y, int64_t rows, int64_t dim,
                        const float* w, float eps);

// x[r, :] *= scale / sqrt(sum(x[r, :]^2) + eps), in place; x: [rows, dim].
void l2norm_rows(float* x, int64_t rows, int64_t dim, float eps, float scale = 1.0f);

}  // namespace hypic::cpu
