// Small elementwise kernels that join the op kernels into a model forward pass (runtime/cuda):
// embedding gather, residual adds into the fp32 hidden stream, Gated DeltaNet gates and q/k/v split,
// dtype conversion of checkpoint weights, and seeded random fills for random-weight models.
// Same math as the CPU forward pass (runtime/cpu_backend.cc). Raw device pointers, row-major.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/types.h"
#include "kernels/dtype.h"

namespace hypic::cuda {

// h[t, :] = float(table[ids[t], :])
//   table: [V, D] bf16; ids: [T] int32 on the device (the caller checks 0 <= id < V); h: [T, D] fp32.
void embed_rows(const bf16* table, const int32_t* ids, int64_t T, int64_t D, float* h, cudaStream_t stream);

// h[t, d] += a[t, d] + (b ? sigmoid(b_gate[t]) * b[t, d] : 0)
//   h: [T, D] fp32; a, b: [T, D] bf16 (b may be null); b_gate: [T] fp32 logits of b's gate (null: gate 1).
// The MoE layer's routed output plus its gated shared expert, added to the residual stream.
void residual_add(float* h, const bf16* a, const bf16* b, const float* b_gate, int64_t T, int64_t D,
                  cudaStream_t stream);

// Gated DeltaNet gates per token and value head j:
//   beta[t, j] = sigmoid(ba[t, j]),  g[t, j] = -exp(A_log[j]) * softplus(ba[t, H + j] + dt_bias[j])
//   ba: [T, 2H] fp32 (the b projection, then the a projection); A_log, dt_bias: [H] fp32;
//   g, beta: [T, H] fp32. softplus is torch's (threshold 20).
void gdn_gates(const float* ba, int64_t T, int64_t H, const float* A_log, const float* dt_bias, float* g, float* beta,
               cudaStream_t stream);

// Splits the conv output of a Gated DeltaNet layer into the delta-rule inputs:
//   conv: [T, 2*Hk*dk + Hv*dv] bf16, rows q (Hk heads) | k (Hk heads) | v (Hv heads);
//   q: [T, Hk, dk] = l2norm(q) * q_scale; k: [T, Hk, dk] = l2norm(k); v: [T, Hv, dv] (copy);
//   l2norm(x) = x / sqrt(sum x^2 + eps), fp32 math. dk <= 1024.
void gdn_split_qkv(const bf16* conv, int64_t T, int64_t Hk, int64_t dk, int64_t Hv, int64_t dv, float q_scale,
                   float eps, bf16* q, bf16* k, bf16* v, cudaStream_t stream);

// One token per row of a Gated DeltaNet layer, from its qkv projection to the delta rule's inputs in one
// launch: causal_conv1d_silu of the row over its own tail (the tail advanced by the row), then
// gdn_split_qkv, bit for bit those ops. qkv: [N, C] bf16, C = 2*Hk*dk + Hv*dv; conv_w: [C, K] bf16;
// row i's tail ([K-1, C] bf16, oldest first, in/out) is tails[i] (a device array of N pointers) or, when
// tails is null, `tail` (N = 1); q, k, v as gdn_split_qkv writes them. 2 <= K <= 8, dk <= 1024.
void gdn_conv_split_rows(const bf16* qkv, int64_t N, int64_t Hk, int64_t dk, int64_t Hv, int64_t dv,
                         const bf16* conv_w, int64_t K, bf16* tail, bf16* const* tails, float q_scale, float eps,
                         bf16* q, bf16* k, bf16* v, cudaStream_t stream);

// dst[i] = bf16(src[i]) for n elements of type t (F32, F16 or BF16; round to nearest even).
// Throws UnsupportedShape for another type.
void convert_to_bf16(const void* src, DType t, int64_t n, bf16* dst, cudaStream_t stream);

// Seeded uniform fills, a pure function of (seed, i): dst[i] ~ U[lo, hi).
void fill_uniform(bf16* dst, int64_t n, float lo, float hi, uint64_t seed, cudaStream_t stream);
void fill_uniform(float* dst, int64_t n, float lo, float hi, uint64_t seed, cudaStream_t stream);

}  // namespace hypic::cuda
