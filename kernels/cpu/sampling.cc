#include "kernels/sampling.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

namespace hypic::cpu {

int64_t argmax(const float* logits, int64_t V) {
  int64_t best = 0;
  for (int64_t i = 1; i < V; ++i)
    if (logits[i] > logits[best]) best = i;
  return best;
}

int64_t sample(const float* logits, int64_t V, const SamplingParams& p, double u) {
  if (p.temperature <= 0.0f || p.top_k == 1) return argmax(logits, V);
  std::vector<int64_t> idx(static_cast<size_t>(V));
  std::iota(idx.begin(), idx.end(), 0);
  // Candidates in descending logit order (ties: lower id first), cut to top-k.
  const int64_t k = p.top_k > 0 ? std::min<int64_t>(p.top_k, V) : V;
  auto by_logit = [&](int64_t a, int64_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); };
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), by_logit);
  idx.resize(static_cast<size_t>(k));
  const double mx = logits[idx[0]];
  std::vector<double> prob(idx.size());
  double sum = 0;
  for (size_t i = 0; i < idx.size(); ++i) sum += prob[i] = std::exp((logits[idx[i]] - mx) / p.temperature);
  // Nucleus: the smallest prefix whose mass reaches top_p.
  size_t keep = idx.size();
  if (p.top_p < 1.0f) {
    double acc = 0;
    for (size_t i = 0; i < idx.size(); ++i) {
      acc += prob[i] / sum;
      if (acc >= p.top_p) {
        keep = i + 1;
        break;
      }
    }
  }
  double kept = 0;
  for (size_t i = 0; i < keep; ++i) kept += prob[i];
  double target = u * kept, acc = 0;
  for (size_t i = 0; i < keep; ++i) {
    acc += prob[i];
    if (target < acc) return idx[i];
  }
  return idx[keep - 1];
}

double kl_divergence(const float* p_logits, const float* q_logits, int64_t V) {
  // log-softmax of both rows in double, then sum p (log p - log q).
  auto log_norm = [V](const float* l) {
    const double mx = *std::max_element(l, l + V);
    double s = 0;
    for (int64_t i = 0; i < V; ++i) s += std::exp(l[i] - mx);
    return mx + std::log(s);
  };
  const double zp = log_norm(p_logits), zq = log_norm(q_logits);
  double kl = 0;
  for (int64_t i = 0; i < V; ++i) {
    const double lp = p_logits[i] - zp, lq = q_logits[i] - zq;
    kl += std::exp(lp) * (lp - lq);
  }
  return std::max(0.0, kl);
}

}  // namespace hypic::cpu
