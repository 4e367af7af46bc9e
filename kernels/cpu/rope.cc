#include "kernels/rope.h"

#include <cmath>
#include <vector>

namespace hypic::cpu {
namespace {

// Same rounding path as the reference: inv_freq in fp32, angle = float(pos) * inv_freq in fp32.
std::vector<float> inv_freqs(int64_t rot_dim, double theta) {
  std::vector<float> f(static_cast<size_t>(rot_dim / 2));
  for (int64_t d = 0; d < rot_dim / 2; ++d) {
    const float expo = static_cast<float>(2 * d) / static_cast<float>(rot_dim);
    f[d] = 1.0f / static_cast<float>(std::pow(theta, static_cast<double>(expo)));
  }
  return f;
}

void rotate_pairs(float* v, int64_t stride, int64_t half, const float* cs, const float* sn) {
  for (int64_t d = 0; d < half; ++d) {
    const float a = v[d * stride], b = v[(d + half) * stride];
    v[d * stride] = a * cs[d] - b * sn[d];
    v[(d + half) * stride] = b * cs[d] + a * sn[d];
  }
}

// cos/sin of delta * inv_freq_d, in double before rounding: one rotation for every shifted row.
struct ShiftTables {
  std::vector<float> cs, sn;
  ShiftTables(int64_t rot_dim, int64_t delta, double theta) {
    const auto f = inv_freqs(rot_dim, theta);
    for (float fd : f) {
      const double ang = static_cast<double>(delta) * fd;
      cs.push_back(static_cast<float>(std::cos(ang)));
      sn.push_back(static_cast<float>(std::sin(ang)));
    }
  }
};

}  // namespace

void rope_apply(float* x, int64_t rows, int64_t heads, int64_t head_dim, int64_t rot_dim,
                const int64_t* positions, double theta) {
  const int64_t half = rot_dim / 2;
  const auto f = inv_freqs(rot_dim, theta);
  std::vector<float> cs(half), sn(half);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t d = 0; d < half; ++d) {
      const float ang = static_cast<float>(positions[r]) * f[d];
      cs[d] = std::cos(ang);
      sn[d] = std::sin(ang);
    }
    for (int64_t h = 0; h < heads; ++h) rotate_pairs(x + (r * heads + h) * head_dim, 1, half, cs.data(), sn.data());
  }
}

void rope_shift(float* x, int64_t rows, int64_t heads, int64_t head_dim, int64_t rot_dim,
                int64_t delta, double theta) {
  if (delta == 0) return;
  const ShiftTables t(rot_dim, delta, theta);
  for (int64_t r = 0; r < rows * heads; ++r) rotate_pairs(x + r * head_dim, 1, rot_dim / 2, t.cs.data(), t.sn.data());
}

void rope_shift_state(float* state, int64_t heads, int64_t dk, int64_t dv, int64_t rot_dim,
                      int64_t delta, double theta) {
  if (delta == 0) return;
  const ShiftTables t(rot_dim, delta, theta);
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t c = 0; c < dv; ++c) rotate_pairs(state + h * dk * dv + c, dv, rot_dim / 2, t.cs.data(), t.sn.data());
}

}  // namespace hypic::cpu
