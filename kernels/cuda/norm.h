// Normalisations on bf16 rows with fp32 statistics (same math as kernels/norm.h).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/types.h"

namespace hypic::cuda {

// y[r, :] = x[r, :] / sqrt(mean(x[r, :]^2) + eps) * (zero_centred ? 1 + w : w)
//   x: [rows, dim] bf16 or fp32 (two overloads); y: [rows, dim] bf16 (may alias a bf16 x); w: [dim] fp32.
void rmsnorm(const bf16* x, bf16* y, int64_t rows, int64_t dim, const float* w, float eps, bool zero_centred,
             cudaStream_t stream);
void rmsnorm(const float* x, bf16* y, int64_t rows, int64_t dim, const float* w, float eps, bool zero_centred,
             cudaStream_t stream);

// Gated DeltaNet output norm: y = w * rmsnorm(o) * silu(z) per row.
//   o, z, y: [rows, dim] bf16 (y may alias o); w: [dim] fp32.
void rmsnorm_gated_silu(const bf16* o, const bf16* z, bf16* y, int64_t rows, int64_t dim, const float* w, float eps,
                        cudaStream_t stream);

// x[r, :] *= scale / sqrt(sum(x[r, :]^2) + eps), in place; x: [rows, dim] bf16.
void l2norm_rows(bf16* x, int64_t rows, int64_t dim, float eps, float scale, cudaStream_t stream);

}  // namespace hypic::cuda
