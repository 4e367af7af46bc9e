// Token sampling from a host logits row: greedy, or temperature + top-k + top-p (nucleus).
#pragma once
#include <cstdint>

namespace hypic {

// How the next token is chosen; the same on every backend (device-neutral).
struct SamplingParams {
  float temperature = 0.0f;  // <= 0: greedy
  int top_k = 0;             // <= 0: no limit
  float top_p = 1.0f;        // (0, 1]
};

}  // namespace hypic

namespace hypic::cpu {

using hypic::SamplingParams;

// Index of the largest logit (the lowest index among ties).
int64_t argmax(const float* logits, int64_t V);

// Samples one id. `u` is a uniform draw in [0, 1) supplied by the caller (so runs are reproducible
// from a seed and the same draw gives the same token on every backend: kernels/cuda/sampling.h implements
// the same definition). x = logits / temperature; keep the ids whose x is at least the k-th largest x
// (top_k <= 0: all), then those at least the largest value whose upper set holds top_p of the kept mass
// (ties at either threshold all kept); walk the kept ids in id order to the one where the running mass
// passes u times the kept mass. temperature <= 0: argmax.
int64_t sample(const float* logits, int64_t V, const SamplingParams& p, double u);

// KL(p || q) of the softmax distributions of two logit rows (>= 0): how far a cached result's next-token
// distribution q is from the reference p.
double kl_divergence(const float* p_logits, const float* q_logits, int64_t V);

}  // namespace hypic::cpu
