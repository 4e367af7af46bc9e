// Matrix products on the CPU (reference backend). Activations are fp32; weights may be F32, BF16 or F16
// and are converted on the fly, so checkpoints stay memory-mapped in their stored type.
#pragma once
#include <cstdint>

#include "kernels/dtype.h"

namespace hypic::cpu {

// y[m, n] = sum_k x[m, k] * w[n, k]           (x: [M, K] row-major fp32; w: [N, K] row-major, type wt)
// With accumulate, y += instead of y =. Rows of x are `ldx` floats apart, rows of y `ldy` apart.
void gemm_xwt(const float* x, int64_t M, int64_t K, int64_t ldx, const void* w, DType wt, int64_t N,
              float* y, int64_t ldy, bool accumulate = false);

// Convenience for dense rows: ldx = K, ldy = N.
inline void linear(const float* x, int64_t M, int64_t K, const void* w, DType wt, int64_t N, float* y,
                   bool accumulate = false) {
  gemm_xwt(x, M, K, K, w, wt, N, y, N, accumulate);
}

// c[M, N] = a[M, K] @ b[K, N] (+ c if accumulate); all fp32, row-major. Used for small state products.
void matmul_f32(const float* a, const float* b, float* c, int64_t M, int64_t K, int64_t N,
                bool accumulate = false);

// Dot product of two fp32 vectors (vectorisable: independent partial sums).
float dot_f32(const float* a, const float* b, int64_t n);

}  // namespace hypic::cpu
