#include "kernels/delta_rule.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/parallel.h"
#include "kernels/gemm.h"

namespace hypic::cpu {

void delta_rule_recurrent(const DeltaRuleShape& s, const float* q, const float* k, const float* v,
                          const float* g, const float* beta, float* state, float* out) {
  const int64_t H = s.H, dk = s.dk, dv = s.dv;
  parallel_for(H, 1, [&](int64_t h0, int64_t h1) {
    std::vector<float> mem(dv);
    for (int64_t h = h0; h < h1; ++h) {
      float* S = state + h * dk * dv;
      for (int64_t t = 0; t < s.T; ++t) {
        const float* kt = k + (t * H + h) * dk;
        const float* vt = v + (t * H + h) * dv;
        const float a = std::exp(g[t * H + h]), b = beta[t * H + h];
        for (int64_t i = 0; i < dk * dv; ++i) S[i] *= a;
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

void delta_rule_chunked(const DeltaRuleShape& s, const float* q, const float* k, const float* v,
                        const float* g, const float* beta, float* state, float* out, int64_t chunk) {
  const int64_t H = s.H, dk = s.dk, dv = s.dv, T = s.T;
  parallel_for(H, 1, [&](int64_t h0, int64_t h1) {
    std::vector<float> G(chunk), KK(chunk * chunk), QK(chunk * chunk), U(chunk * dv), Kc(chunk * dk),
        Qc(chunk * dk), SK(chunk * dv), W(chunk * dk);
    for (int64_t h = h0; h < h1; ++h) {
      float* S = state + h * dk * dv;
      for (int64_t c0 = 0; c0 < T; c0 += chunk) {
        const int64_t L = std::min(chunk, T - c0);
        // Gather this head's rows and the cumulative log decay G_i = sum_{j<=i} g_j.
        float acc = 0;
        for (int64_t i = 0; i < L; ++i) {
          const int64_t t = c0 + i;
          acc += g[t * H + h];
          G[i] = acc;
          std::copy_n(k + (t * H + h) * dk, dk, &Kc[i * dk]);
          std::copy_n(q + (t * H + h) * dk, dk, &Qc[i * dk]);
        }
        // SK[i] = S0^T k_i ; U[i] = beta_i (v_i - exp(G_i) S0^T k_i)
        matmul_f32(Kc.data(), S, SK.data(), L, dk, dv);
        for (int64_t i = 0; i < L; ++i) {
          const int64_t t = c0 + i;
          const float b = beta[t * H + h], e = std::exp(G[i]);
          const float* vt = v + (t * H + h) * dv;
          for (int64_t j = 0; j < dv; ++j) U[i * dv + j] = b * (vt[j] - e * SK[i * dv + j]);
        }
        // Gram matrices within the chunk.
        for (int64_t i = 0; i < L; ++i)
          for (int64_t j = 0; j <= i; ++j) {
            KK[i * chunk + j] = dot_f32(&Kc[i * dk], &Kc[j * dk], dk);
            QK[i * chunk + j] = dot_f32(&Qc[i * dk], &Kc[j * dk], dk);
          }
        // Forward substitution: u_i -= beta_i sum_{j<i} exp(G_i - G_j) (k_i . k_j) u_j.
        for (int64_t i = 1; i < L; ++i) {
          const float b = beta[(c0 + i) * H + h];
          float* ui = &U[i * dv];
          for (int64_t j = 0; j < i; ++j) {
            const float c = b * std::exp(G[i] - G[j]) * KK[i * chunk + j];
            if (c == 0.0f) continue;
            const float* uj = &U[j * dv];
            for (int64_t d = 0; d < dv; ++d) ui[d] -= c * uj[d];
          }
        }
        // o_i = exp(G_i) S0^T q_i + sum_{j<=i} exp(G_i - G_j) (q_i . k_j) u_j
        if (out) {
          matmul_f32(Qc.data(), S, SK.data(), L, dk, dv);  // reuse SK as S0^T q
          for (int64_t i = 0; i < L; ++i) {
            float* oi = out + ((c0 + i) * H + h) * dv;
            const float e = std::exp(G[i]);
            for (int64_t d = 0; d < dv; ++d) oi[d] = e * SK[i * dv + d];
            for (int64_t j = 0; j <= i; ++j) {
              const float c = std::exp(G[i] - G[j]) * QK[i * chunk + j];
              const float* uj = &U[j * dv];
              for (int64_t d = 0; d < dv; ++d) oi[d] += c * uj[d];
            }
          }
        }
        // S_L = exp(G_L) S0 + sum_j exp(G_L - G_j) k_j u_j^T
        const float eL = std::exp(G[L - 1]);
        for (int64_t i = 0; i < dk * dv; ++i) S[i] *= eL;
        for (int64_t j = 0; j < L; ++j) {
          const float c = std::exp(G[L - 1] - G[j]);
          for (int64_t a = 0; a < dk; ++a) W[j * dk + a] = c * Kc[j * dk + a];
        }
        // S += W^T U  (W: [L, dk], U: [L, dv])
        for (int64_t j = 0; j < L; ++j)
          for (int64_t a = 0; a < dk; ++a) {
            const float wa = W[j * dk + a];
            float* Sr = S + a * dv;
            const float* uj = &U[j * dv];
            for (int64_t d = 0; d < dv; ++d) Sr[d] += wa * uj[d];
          }
      }
    }
  });
}

void delta_rule_transfer(int64_t T, int64_t H, int64_t dk, const float* k, const float* g,
                         const float* beta, float* transfer) {
  parallel_for(H, 1, [&](int64_t h0, int64_t h1) {
    std::vector<float> kt_M(dk);
    for (int64_t h = h0; h < h1; ++h) {
      float* M = transfer + h * dk * dk;
      for (int64_t t = 0; t < T; ++t) {
        const float* kt = k + (t * H + h) * dk;
        const float a = std::exp(g[t * H + h]), b = beta[t * H + h];
        // M <- a (M - b k (k^T M))
        std::fill(kt_M.begin(), kt_M.end(), 0.0f);
        for (int64_t i = 0; i < dk; ++i)
          for (int64_t j = 0; j < dk; ++j) kt_M[j] += kt[i] * M[i * dk + j];
        for (int64_t i = 0; i < dk; ++i) {
          const float bk = b * kt[i];
          for (int64_t j = 0; j < dk; ++j) M[i * dk + j] = a * (M[i * dk + j] - bk * kt_M[j]);
        }
      }
    }
  });
}

}  // namespace hypic::cpu
