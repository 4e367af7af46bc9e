// Kimi Delta Attention (KDA, Kimi-Linear's linear layer): the gated delta rule with a per-channel decay,
// per head, fp32, S in [dk, dv] orientation:
//   S_t = (I - beta_t k_t k_t^T) diag(exp(g_t)) S_{t-1} + beta_t k_t v_t^T,   o_t = S_t^T q_t
// (decay first, then the delta update, as transformers' recurrent_kimi_delta_attention). The transition
// A_t = (I - beta_t k_t k_t^T) diag(exp(g_t)) is dense and not symmetric. q and k are expected already
// l2-normalised and q already scaled. Heads are independent and run in parallel.
#pragma once
#include <cstdint>

#include "kernels/delta_rule.h"

namespace hypic::cpu {

// q, k: [T, H, dk]; v: [T, H, dv]; g (log decay per key channel): [T, H, dk]; beta: [T, H];
// state: [H, dk, dv] in/out; out: [T, H, dv] (may be null when only the state is wanted).
void kda_recurrent(const DeltaRuleShape& s, const float* q, const float* k, const float* v, const float* g,
                   const float* beta, float* state, float* out);

// Transfer operator of a token span (DESIGN §1.2): transfer[h] <- A_T ... A_1 transfer[h] with A_t as above;
// k, g: [T, H, dk]; beta: [T, H]; transfer: [H, dk, dk] in/out (pass the identity to start a new span).
void kda_transfer(int64_t T, int64_t H, int64_t dk, const float* k, const float* g, const float* beta,
                  float* transfer);

}  // namespace hypic::cpu
