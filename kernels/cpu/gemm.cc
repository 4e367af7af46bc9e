#include "kernels/gemm.h"

#include <algorithm>
#include <vector>

#include "kernels/cpu/parallel.h"

namespace hypic::cpu {

float dot_f32(const float* a, const float* b, int64_t n) {
  float acc[16] = {0};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (int j = 0; j < 16; ++j) acc[j] += a[i + j] * b[i + j];
  float s = 0;
  for (; i < n; ++i) s += a[i] * b[i];
  for (int j = 0; j < 16; ++j) s += acc[j];
  return s;
}

namespace {

// Four rows of w against one row of x: shares the loads of x.
inline void dot4(const float* x, const float* w0, const float* w1, const float* w2, const float* w3,
                 int64_t K, float* out) {
  float a0[8] = {0}, a1[8] = {0}, a2[8] = {0}, a3[8] = {0};
  int64_t i = 0;
  for (; i + 8 <= K; i += 8) {
    for (int j = 0; j < 8; ++j) {
      const float xv = x[i + j];
      a0[j] += xv * w0[i + j];
      a1[j] += xv * w1[i + j];
      a2[j] += xv * w2[i + j];
      a3[j] += xv * w3[i + j];
    }
  }
  float s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  for (; i < K; ++i) {
    s0 += x[i] * w0[i];
    s1 += x[i] * w1[i];
    s2 += x[i] * w2[i];
    s3 += x[i] * w3[i];
  }
  for (int j = 0; j < 8; ++j) {
    s0 += a0[j];
    s1 += a1[j];
    s2 += a2[j];
    s3 += a3[j];
  }
  out[0] = s0;
  out[1] = s1;
  out[2] = s2;
  out[3] = s3;
}

}  // namespace

void gemm_xwt(const float* x, int64_t M, int64_t K, int64_t ldx, const void* w, DType wt, int64_t N,
              float* y, int64_t ldy, bool accumulate) {
  if (M <= 0 || N <= 0) return;
  constexpr int64_t kRowBlock = 16;  // weight rows converted and reused across all of x's rows
  const int64_t nblocks = (N + kRowBlock - 1) / kRowBlock;
  const size_t esz = dtype_size(wt);
  parallel_for(nblocks, 1, [&](int64_t b0, int64_t b1) {
    std::vector<float> buf(static_cast<size_t>(kRowBlock * K));
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t n0 = b * kRowBlock, nn = std::min(kRowBlock, N - n0);
      const float* wf;
      if (wt == DType::F32) {
        wf = static_cast<const float*>(w) + n0 * K;
      } else {
        convert_to_f32(static_cast<const char*>(w) + n0 * K * esz, wt, nn * K, buf.data());
        wf = buf.data();
      }
      for (int64_t m = 0; m < M; ++m) {
        const float* xr = x + m * ldx;
        float* yr = y + m * ldy + n0;
        int64_t r = 0;
        float out[4];
        for (; r + 4 <= nn; r += 4) {
          dot4(xr, wf + r * K, wf + (r + 1) * K, wf + (r + 2) * K, wf + (r + 3) * K, K, out);
          for (int j = 0; j < 4; ++j) yr[r + j] = accumulate ? yr[r + j] + out[j] : out[j];
        }
        for (; r < nn; ++r) {
          const float v = dot_f32(xr, wf + r * K, K);
          yr[r] = accumulate ? yr[r] + v : v;
        }
      }
    }
  });
}

void matmul_f32(const float* a, const float* b, float* c, int64_t M, int64_t K, int64_t N,
                bool accumulate) {
  for (int64_t i = 0; i < M; ++i) {
    float* cr = c + i * N;
    if (!accumulate) std::fill(cr, cr + N, 0.0f);
    for (int64_t k = 0; k < K; ++k) {
      const float av = a[i * K + k];
      if (av == 0.0f) continue;
      const float* br = b + k * N;
      for (int64_t j = 0; j < N; ++j) cr[j] += av * br[j];
    }
  }
}

}  // namespace hypic::cpu
