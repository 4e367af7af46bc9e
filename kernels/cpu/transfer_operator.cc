#include "kernels/transfer_operator.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/parallel.h"
#include "runtime/error.h"

namespace hypic::cpu {

int64_t transfer_numel(const TransferShape& s) {
  switch (s.kind) {
    case TransferKind::Scalar: return s.H;
    case TransferKind::Diagonal: return s.H * s.dk;
    case TransferKind::Dense: return s.H * s.dk * s.dk;
  }
  return 0;
}

int64_t state_numel(const TransferShape& s) { return s.H * s.dk * s.dv; }

void transfer_identity(const TransferShape& s, float* T) {
  const int64_t n = transfer_numel(s);
  if (s.kind != TransferKind::Dense) {
    std::fill(T, T + n, 1.0f);
    return;
  }
  std::fill(T, T + n, 0.0f);
  for (int64_t h = 0; h < s.H; ++h)
    for (int64_t i = 0; i < s.dk; ++i) T[(h * s.dk + i) * s.dk + i] = 1.0f;
}

void transfer_apply(const TransferShape& s, const float* T, const float* S0, const float* S_body, float* out) {
  const int64_t dk = s.dk, dv = s.dv;
  parallel_for(s.H, 1, [&](int64_t h0, int64_t h1) {
    std::vector<float> tmp(static_cast<size_t>(dk * dv));
    for (int64_t h = h0; h < h1; ++h) {
      const float* s0 = S0 + h * dk * dv;
      const float* sb = S_body + h * dk * dv;
      switch (s.kind) {
        case TransferKind::Scalar:
          for (int64_t i = 0; i < dk * dv; ++i) tmp[i] = T[h] * s0[i] + sb[i];
          break;
        case TransferKind::Diagonal:
          for (int64_t i = 0; i < dk; ++i)
            for (int64_t j = 0; j < dv; ++j) tmp[i * dv + j] = T[h * dk + i] * s0[i * dv + j] + sb[i * dv + j];
          break;
        case TransferKind::Dense: {
          const float* Th = T + h * dk * dk;
          std::copy(sb, sb + dk * dv, tmp.begin());
          for (int64_t i = 0; i < dk; ++i)
            for (int64_t m = 0; m < dk; ++m) {
              const float t = Th[i * dk + m];
              if (t == 0.0f) continue;
              const float* row = s0 + m * dv;
              for (int64_t j = 0; j < dv; ++j) tmp[i * dv + j] += t * row[j];
            }
          break;
        }
      }
      std::copy(tmp.begin(), tmp.end(), out + h * dk * dv);
    }
  });
}

void transfer_compose(const TransferShape& s, const float* T2, const float* T1, float* out) {
  if (s.kind != TransferKind::Dense) {
    const int64_t n = transfer_numel(s);
    for (int64_t i = 0; i < n; ++i) out[i] = T2[i] * T1[i];
    return;
  }
  const int64_t dk = s.dk;
  std::vector<float> tmp(static_cast<size_t>(dk * dk));
  for (int64_t h = 0; h < s.H; ++h) {
    const float* a = T2 + h * dk * dk;
    const float* b = T1 + h * dk * dk;
    std::fill(tmp.begin(), tmp.end(), 0.0f);
    for (int64_t i = 0; i < dk; ++i)
      for (int64_t m = 0; m < dk; ++m) {
        const float av = a[i * dk + m];
        for (int64_t j = 0; j < dk; ++j) tmp[i * dk + j] += av * b[m * dk + j];
      }
    std::copy(tmp.begin(), tmp.end(), out + h * dk * dk);
  }
}

namespace {
inline float decay_of(const TransferShape& s, const float* log_a, int64_t t, int64_t h, int64_t i) {
  return s.kind == TransferKind::Scalar ? std::exp(log_a[t * s.H + h]) : std::exp(log_a[(t * s.H + h) * s.dk + i]);
}
}  // namespace

void gated_linear_scan(const TransferShape& s, int64_t T, const float* q, const float* k, const float* v,
                       const float* log_a, float* state, float* out) {
  HYPIC_ASSERT(s.kind != TransferKind::Dense, "gated linear paths take scalar or diagonal decays");
  const int64_t dk = s.dk, dv = s.dv, H = s.H;
  for (int64_t h = 0; h < H; ++h) {
    float* S = state + h * dk * dv;
    for (int64_t t = 0; t < T; ++t) {
      const float* kt = k + (t * H + h) * dk;
      const float* vt = v + (t * H + h) * dv;
      for (int64_t i = 0; i < dk; ++i) {
        const float a = decay_of(s, log_a, t, h, i);
        for (int64_t j = 0; j < dv; ++j) S[i * dv + j] = a * S[i * dv + j] + kt[i] * vt[j];
      }
      if (out) {
        const float* qt = q + (t * H + h) * dk;
        float* ot = out + (t * H + h) * dv;
        std::fill(ot, ot + dv, 0.0f);
        for (int64_t i = 0; i < dk; ++i)
          for (int64_t j = 0; j < dv; ++j) ot[j] += S[i * dv + j] * qt[i];
      }
    }
  }
}

void gated_linear_transfer(const TransferShape& s, int64_t T, const float* log_a, float* transfer) {
  HYPIC_ASSERT(s.kind != TransferKind::Dense, "gated linear paths take scalar or diagonal decays");
  for (int64_t h = 0; h < s.H; ++h) {
    if (s.kind == TransferKind::Scalar) {
      double sum = 0;
      for (int64_t t = 0; t < T; ++t) sum += log_a[t * s.H + h];
      transfer[h] *= static_cast<float>(std::exp(sum));
    } else {
      for (int64_t i = 0; i < s.dk; ++i) {
        double sum = 0;
        for (int64_t t = 0; t < T; ++t) sum += log_a[(t * s.H + h) * s.dk + i];
        transfer[h * s.dk + i] *= static_cast<float>(std::exp(sum));
      }
    }
  }
}

}  // namespace hypic::cpu
