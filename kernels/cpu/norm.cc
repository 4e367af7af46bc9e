#include "kernels/norm.h"

#include <cmath>

#include "kernels/activation.h"

namespace hypic::cpu {

void rmsnorm(const float* x, float* y, int64_t rows, int64_t dim, const float* w, float eps,
             bool zero_centred) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * dim;
    float* yr = y + r * dim;
    double ss = 0;
    for (int64_t i = 0; i < dim; ++i) ss += static_cast<double>(xr[i]) * xr[i];
    const float inv = 1.0f / std::sqrt(static_cast<float>(ss / dim) + eps);
    for (int64_t i = 0; i < dim; ++i) yr[i] = xr[i] * inv * (zero_centred ? 1.0f + w[i] : w[i]);
  }
}

void rmsnorm_gated_silu(const float* o, const float* z, float* y, int64_t rows, int64_t dim,
                        const float* w, float eps) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* orow = o + r * dim;
    const float* zr = z + r * dim;
    float* yr = y + r * dim;
    double ss = 0;
    for (int64_t i = 0; i < dim; ++i) ss += static_cast<double>(orow[i]) * orow[i];
    const float inv = 1.0f / std::sqrt(static_cast<float>(ss / dim) + eps);
    for (int64_t i = 0; i < dim; ++i) yr[i] = w[i] * (orow[i] * inv) * silu(zr[i]);
  }
}

void l2norm_rows(float* x, int64_t rows, int64_t dim, float eps, float scale) {
  for (int64_t r = 0; r < rows; ++r) {
    float* xr = x + r * dim;
    double ss = 0;
    for (int64_t i = 0; i < dim; ++i) ss += static_cast<double>(xr[i]) * xr[i];
    const float f = scale / std::sqrt(static_cast<float>(ss) + eps);
    for (int64_t i = 0; i < dim; ++i) xr[i] *= f;
  }
}

}  // namespace hypic::cpu
