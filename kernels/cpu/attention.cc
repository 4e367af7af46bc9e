#include "kernels/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/cpu/parallel.h"
#include "kernels/gemm.h"

namespace hypic::cpu {

void attention(const AttentionShape& s, const float* q, const float* k, const float* v,
               const int64_t* q_pos, const int64_t* k_pos, float scale, float* out) {
  const int64_t group = s.Hq / s.Hkv;
  parallel_for(s.Tq * s.Hq, 1, [&](int64_t b, int64_t e) {
    std::vector<float> score(static_cast<size_t>(s.Tk));
    for (int64_t idx = b; idx < e; ++idx) {
      const int64_t i = idx / s.Hq, h = idx % s.Hq, kh = h / group;
      const float* qi = q + (i * s.Hq + h) * s.d;
      float* oi = out + (i * s.Hq + h) * s.dv;
      float mx = -std::numeric_limits<float>::infinity();
      for (int64_t j = 0; j < s.Tk; ++j) {
        if (k_pos[j] > q_pos[i]) {
          score[j] = -std::numeric_limits<float>::infinity();
          continue;
        }
        score[j] = dot_f32(qi, k + (j * s.Hkv + kh) * s.d, s.d) * scale;
        mx = std::max(mx, score[j]);
      }
      std::fill(oi, oi + s.dv, 0.0f);
      if (mx == -std::numeric_limits<float>::infinity()) continue;
      double sum = 0;
      for (int64_t j = 0; j < s.Tk; ++j) {
        if (score[j] == -std::numeric_limits<float>::infinity()) continue;
        const float p = std::exp(score[j] - mx);
        sum += p;
        const float* vj = v + (j * s.Hkv + kh) * s.dv;
        for (int64_t d = 0; d < s.dv; ++d) oi[d] += p * vj[d];
      }
      const float inv = static_cast<float>(1.0 / sum);
      for (int64_t d = 0; d < s.dv; ++d) oi[d] *= inv;
    }
  });
}

}  // namespace hypic::cpu
