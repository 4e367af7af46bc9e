// Small kernels that join the op kernels into the forward pass of the Ring, MiniMax, Kimi-Linear and
// Ring-2.5 families (runtime/cuda): the post-norm residual of MiniMax, the lightning output's group norm and
// gate, KDA's per-channel gates, the sigmoid group-limited router, the MLA row layout, the per-head output
// gate and the scalar transfer operator. Same math as the CPU forward pass (runtime/cpu_backend.cc). Raw
// device pointers, row-major; fp32 arithmetic throughout.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/types.h"

namespace hypic::cuda {

// RMSNorm whose normed rows also become the residual stream (MiniMax: h = alpha * norm(h)):
//   x[r, :] = bf16(n[r, :]),  h[r, :] = alpha * n[r, :],  n = h / sqrt(mean(h^2) + eps) * (zc ? 1 + w : w)
//   h: [rows, dim] fp32 in/out; x: [rows, dim] bf16; w: [dim] fp32.
void rmsnorm_into_residual(float* h, bf16* x, int64_t rows, int64_t dim, const float* w, float eps, bool zero_centred,
                           float alpha, cudaStream_t stream);

// x[i] *= s for n bf16 elements.
void scale_bf16(bf16* x, float s, int64_t n, cudaStream_t stream);

// The lightning layer's output: RMSNorm over each of `groups` contiguous groups of a row, times the
// per-channel weight, times beta * sigmoid(z):
//   o, z: [rows, width] bf16 (o in/out); w: [width] fp32; width % groups == 0.
void group_rmsnorm_gate(bf16* o, const bf16* z, int64_t rows, int64_t width, int64_t groups, const float* w, float eps,
                        float beta, cudaStream_t stream);

// KDA's gates, in place:
//   g: [T, H, dk] fp32, in: the forget-gate projection f; out: the log decay per key channel
//     lower_bound < 0 (Ring-2.5's safe gate): lower_bound * sigmoid(exp(A_log[h]) * (f + dt_bias[h, i]))
//     otherwise (Kimi):                       -exp(A_log[h]) * softplus(f + dt_bias[h, i])
//   beta: [T, H] fp32, in: the b projection; out: its sigmoid
//   A_log: [H]; dt_bias: [H, dk] fp32.
void kda_gates(float* g, float* beta, int64_t T, int64_t H, int64_t dk, const float* A_log, const float* dt_bias,
               float lower_bound, cudaStream_t stream);

// The sigmoid router with an expert bias and group-limited top-k (Ring, Kimi, Ring-2.5), per token t:
//   score_e = sigmoid(logits[t, e]); choice_e = score_e + bias[e]; with groups > 1 the groups (E / groups
//   consecutive experts) are ranked by the sum of their two largest choices and the experts of all but the
//   best topk_group groups get choice -inf (mask_inf) or 0; the top k by choice are taken (ties: lower
//   index), weights[t, j] = score_e (divided by the chosen scores' sum if renormalise) * scale.
//   logits: [T, E] fp32; bias: [E] fp32; ids: [T, K] int32; weights: [T, K] fp32. E <= 1024, groups <= 64.
void moe_route_sigmoid_group(const float* logits, const float* bias, int64_t T, int64_t E, int64_t K, int64_t groups,
                             int64_t topk_group, bool mask_inf, bool renormalise, float scale, int32_t* ids,
                             float* weights, cudaStream_t stream);

// MLA's rows in the engine's layout, rotated dims first (runtime/cpu_backend.cc, mla_project):
//   mla_queries: qp [T, H, nope + rope] (checkpoint order) -> q [T, H, rope + nope]; the rope part's pairs
//     (x0, x1), (x2, x3), ... become halves when deinterleave is set (copied in order otherwise).
//   mla_keys_values: lat [T, ld_lat] holds the shared k_rope at columns [R, R + rope); kv [T, H, nope + dv]
//     the decompressed k_nope | v per head -> k [T, H, rope + nope] = [k_rope | k_nope], v [T, H, rope + nope]
//     = [v | 0] (zero-padded, dv <= rope + nope).
void mla_queries(const bf16* qp, int64_t T, int64_t H, int64_t nope, int64_t rope, bool deinterleave, bf16* q,
                 cudaStream_t stream);
void mla_keys_values(const bf16* lat, int64_t ld_lat, int64_t R, const bf16* kv, int64_t T, int64_t H, int64_t nope,
                     int64_t rope, int64_t dv, bool deinterleave, bf16* k, bf16* v, cudaStream_t stream);

// x[r, :] *= sigmoid(gate[r]) (a per-head output gate: r runs over tokens x heads).
//   x: [rows, dim] bf16; gate: [rows] fp32.
void head_sigmoid_scale(bf16* x, const float* gate, int64_t rows, int64_t dim, cudaStream_t stream);

// The scalar transfer operator of lightning attention (kernels/transfer_operator.h, Scalar kind), per head:
//   scalar_transfer_extend: T[h] *= exp(log_decay[h] * tokens) (the operator of `tokens` more tokens; the
//     exponent in double, as cpu::gated_linear_transfer sums it);
//   scalar_transfer_apply: S[h, :] = (T ? T[h] : 1) * S[h, :] + body[h, :] (T null: the naive sum).
//   T, log_decay: [H] fp32; S, body: [H, per_head] fp32 (S in/out).
void scalar_transfer_extend(float* T, const float* log_decay, int64_t H, int64_t tokens, cudaStream_t stream);
void scalar_transfer_apply(float* S, const float* T, const float* body, int64_t H, int64_t per_head,
                           cudaStream_t stream);

}  // namespace hypic::cuda
