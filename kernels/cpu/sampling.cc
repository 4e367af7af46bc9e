#include "kernels/sampling.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <vector>

namespace hypic::cpu {

int64_t argmax(const float* logits, int64_t V) {
  int64_t best = 0;
  for (int64_t i = 1; i < V; ++i)
    if (logits[i] > logits[best]) best = i;
  return best;
}

int64_t sample(const float* logits, int64_t V, const SamplingParams& p, double u) {
  if (p.temperature <= 0.0f) return argmax(logits, V);
  // The definition every backend implements (kernels/cuda/sampling.h), so that one draw gives one token:
  // scaled logits in float as the device computes them; the kept set is every id whose scaled logit is
  // at least a threshold (ties at a threshold are all kept); the draw walks the kept ids in id order.
  const float inv_t = 1.0f / p.temperature;
  std::vector<float> x(static_cast<size_t>(V));
  for (int64_t i = 0; i < V; ++i) x[i] = logits[i] * inv_t;
  std::vector<float> desc = x;
  std::sort(desc.begin(), desc.end(), std::greater<float>());
  const double mx = desc[0];
  // Top-k: the k-th largest value.
  float thr = p.top_k > 0 && p.top_k < V ? desc[static_cast<size_t>(p.top_k - 1)] : desc.back();
  // Top-p: the largest value whose upper set (all its ties included) holds top_p of the top-k mass.
  if (p.top_p < 1.0f) {
    double kept = 0;
    for (float v : desc) {
      if (v < thr) break;
      kept += std::exp(v - mx);
    }
    const double target = p.top_p * kept;
    double acc = 0;
    for (size_t i = 0; i < desc.size() && desc[i] >= thr; ++i) {
      acc += std::exp(desc[i] - mx);
      if (acc >= target && (i + 1 == desc.size() || desc[i + 1] != desc[i])) {
        thr = desc[i];
        break;
      }
    }
  }
  double total = 0;
  for (float v : x)
    if (v >= thr) total += std::exp(v - mx);
  const double target = u * total;
  double acc = 0;
  int64_t last = 0;
  for (int64_t i = 0; i < V; ++i) {
    if (x[i] < thr) continue;
    acc += std::exp(x[i] - mx);
    last = i;
    if (target < acc) return i;
  }
  return last;  // u at the very top of the float sum
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
