// Gated delta rule (Gated DeltaNet), per head, fp32:
//   S_t = exp(g_t) (I - beta_t k_t k_t^T) S_{t-1} + beta_t k_t v_t^T,   o_t = S_t^T q_t
// with S in [dk, dv] orientation (reference §1.3). q and k are expected already l2-normalised and
// q already scaled. Heads are independent and run in parallel.
#pragma once
#include <cstdint>

namespace hypic::cpu {

struct DeltaRuleShape {
  int64_t T;   // tokens
  int64_t H;   // heads (value heads; q/k already expanded to H)
  int64_t dk;  // key dim
  int64_t dv;  // value dim
};

// q, k: [T, H, dk]; v: [T, H, dv]; g (log decay), beta: [T, H]; state: [H, dk, dv] in/out;
// out: [T, H, dv] (may be null when only the state is wanted).
void delta_rule_recurrent(const DeltaRuleShape& s, const float* q, const float* k, const float* v,
                          const float* g, const float* beta, float* state, float* out);

// Same result, computed chunk by chunk (chunk of `chunk` tokens): inside a chunk the pseudo-values
// u_t = beta_t (v_t - exp(g_t) S_{t-1}^T k_t) are solved by forward substitution on a lower-triangular
// system, and outputs/state come from matrix products (the WY/UT form used by prefill kernels).
void delta_rule_chunked(const DeltaRuleShape& s, const float* q, const float* k, const float* v,
                        const float* g, const float* beta, float* state, float* out, int64_t chunk = 64);

// Transfer operator of a token span (DESIGN §1.2): transfer[h] = A_T ... A_1 for
// A_t = exp(g_t) (I - beta_t k_t k_t^T); k: [T, H, dk]; g, beta: [T, H]; transfer: [H, dk, dk] in/out
// (left-multiplied onto its input, so pass the identity to start a new span).
void delta_rule_transfer(int64_t T, int64_t H, int64_t dk, const float* k, const float* g,
                         const float* beta, float* transfer);

}  // namespace hypic::cpu
