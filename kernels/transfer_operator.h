// Segment transfer operators (DESIGN §1.2): per layer and head, S(C | S0) = T_C S0 + S(C | 0).
// Three shapes behind one interface:
//   Scalar   (Lightning, RetNet, Mamba2):  T: [H]          (T_C = prod of per-head decays)
//   Diagonal (GLA-style gates):            T: [H, dk]      (per key-channel decays)
//   Dense    (Gated DeltaNet, KDA):        T: [H, dk, dk]  (matrix acting on the left of [dk, dv])
// States are [H, dk, dv] fp32.
#pragma once
#include <cstdint>

namespace hypic::cpu {

enum class TransferKind { Scalar, Diagonal, Dense };

struct TransferShape {
  TransferKind kind;
  int64_t H, dk, dv;
};

int64_t transfer_numel(const TransferShape& s);
int64_t state_numel(const TransferShape& s);

// T = identity of the given shape.
void transfer_identity(const TransferShape& s, float* T);

// out = T S0 + S_body (out may alias S0 or S_body).
void transfer_apply(const TransferShape& s, const float* T, const float* S0, const float* S_body, float* out);

// out = T2 T1: the operator of C1 followed by C2 (out may alias either input).
void transfer_compose(const TransferShape& s, const float* T2, const float* T1, float* out);

// Scalar / diagonal gated linear attention, the recurrence behind those two shapes:
//   S_t = diag(exp(log_a_t)) S_{t-1} + k_t v_t^T,  o_t = S_t^T q_t
// q, k: [T, H, dk]; v: [T, H, dv]; log_a: [T, H] (Scalar) or [T, H, dk] (Diagonal);
// state: [H, dk, dv] in/out; out: [T, H, dv] or null.
void gated_linear_scan(const TransferShape& s, int64_t T, const float* q, const float* k, const float* v,
                       const float* log_a, float* state, float* out);

// T <- (transition of the T tokens) T, for the Scalar / Diagonal shapes; log_a as above.
void gated_linear_transfer(const TransferShape& s, int64_t T, const float* log_a, float* transfer);

}  // namespace hypic::cpu
