#include "kernels/kda.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/parallel.h"

namespace hypic::cpu {

void kda_recurrent(const DeltaRuleShape& s, const float* q, const float* k, const float* v, const float* g,
                   const float* beta, float* state, float* out) {
  const int64_t H = s.H, dk = s.dk, dv = s.dv;
  parallel_for(H, 1, [&](int64_t h0, int64_t h1) {
    std::vector<float> mem(dv);
    for (int64_t h = h0; h < h1; ++h) {
      float* S = state + h * dk * dv;
      for (int64_t t = 0; t < s.T; ++t) {
        const float* kt = k + (t * H + h) * dk;
        const float* vt = v + (t * H + h) * dv;
        const float* gt = g + (t * H + h) * dk;
        const float b = beta[t * H + h];
        for (int64_t i = 0; i < dk; ++i) {  // S <- diag(exp g) S: row i decays by its channel's gate
          const float a = std::exp(gt[i]);
          for (int64_t j = 0; j < dv; ++j) S[i * dv + j] *= a;
        }
        std::fill(mem.begin(), mem.end(), 0.0f);
        for (int64_t i = 0; i < dk; ++i)
          for (int64_t j = 0; j < dv; ++j) mem[j] += S[i * dv + j] * kt[i];
        for (int64_t j = 0; j < dv; ++j) mem[j] = (vt[j] - mem[j]) * b;
        for (int64_t i = 0; i < dk; ++i)
          for (int64_t j = 0; j < dv; ++j) S[i * dv + j] += kt[i] * mem[j];
        if (out) {
          const float* qt = q + (t * H + h) * dk;
          float* ot = out + (t * H + h) * dv;
          std::fill(ot, ot + dv, 0.0f);
          for (int64_t i = 0; i < dk; ++i)
            for (int64_t j = 0; j < dv; ++j) ot[j] += S[i * dv + j] * qt[i];
        }
      }
    }
  });
}

void kda_transfer(int64_t T, int64_t H, int64_t dk, const float* k, const float* g, const float* beta,
                  float* transfer) {
  parallel_for(H, 1, [&](int64_t h0, int64_t h1) {
    std::vector<float> kt_M(dk);
    for (int64_t h = h0; h < h1; ++h) {
      float* M = transfer + h * dk * dk;
      for (int64_t t = 0; t < T; ++t) {
        const float* kt = k + (t * H + h) * dk;
        const float* gt = g + (t * H + h) * dk;
        const float b = beta[t * H + h];
        // M <- diag(exp g) M, then M <- M - b k (k^T M)
        for (int64_t i = 0; i < dk; ++i) {
          const float a = std::exp(gt[i]);
          for (int64_t j = 0; j < dk; ++j) M[i * dk + j] *= a;
        }
        std::fill(kt_M.begin(), kt_M.end(), 0.0f);
        for (int64_t i = 0; i < dk; ++i)
          for (int64_t j = 0; j < dk; ++j) kt_M[j] += kt[i] * M[i * dk + j];
        for (int64_t i = 0; i < dk; ++i) {
          const float bk = b * kt[i];
          for (int64_t j = 0; j < dk; ++j) M[i * dk + j] -= bk * kt_M[j];
        }
      }
    }
  });
}

}  // namespace hypic::cpu
