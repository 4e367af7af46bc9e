// Lightning attention on device (scalar per-head decay, no delta rule; the math of cpu::gated_linear_scan
// with a Scalar transfer shape whose log decay is constant over tokens), per value head h:
//   S_t = exp(lambda_h) S_{t-1} + k_t v_t^T,   o_t = S_t^T q_t
// S is [dk, dv] fp32. q is expected already scaled (the CPU contract). Shapes use GdnShape (same packing
// convention as gdn_chunked_prefill); q/k have Hk heads and value head h reads q/k head h / (H / Hk)
// (Hk == H for Ring-linear and MiniMax).
#pragma once
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "kernels/cuda/delta_rule.h"
#include "kernels/cuda/types.h"

namespace hypic::cuda {

// Chunked prefill (chunk 64, tensor cores) over packed variable-length sequences.
//   q, k:       [T, Hk, dk] bf16           v: [T, H, dv] bf16
//   log_decay:  [H] fp32, lambda_h <= 0 (the same for every token)
//   cu_seqlens: [N + 1] int32 on the device, token offsets of the packed sequences (null when N == 1);
//               max_seqlen: the longest sequence (host value)
//   state:      [N, H, dk, dv] fp32, in/out: the initial state, replaced by the final state
//   out:        [T, H, dv] bf16, or null when only the state is wanted
// No workspace: one block walks the chunks of a (sequence, head, 32 state columns) in order.
// Throws UnsupportedShape for dk > 128 or inconsistent heads.
void lightning_chunked_prefill(const GdnShape& s, const bf16* q, const bf16* k, const bf16* v, const float* log_decay,
                               const int32_t* cu_seqlens, int64_t max_seqlen, float* state, bf16* out,
                               cudaStream_t stream);

// Recurrent form for decode (and short spans): s.N independent sequences of s.T tokens EACH.
//   q, k: [N, T, Hk, dk] bf16; v: [N, T, H, dv] bf16; log_decay: [H] fp32;
//   state: [N, H, dk, dv] fp32 in/out; out: [N, T, H, dv] bf16 or null. dk <= 128.
//   states (optional): [N] device array of pointers to each sequence's own [H, dk, dv] state, used instead
//   of `state`.
void lightning_recurrent(const GdnShape& s, const bf16* q, const bf16* k, const bf16* v, const float* log_decay,
                         float* state, bf16* out, cudaStream_t stream, float* const* states = nullptr);

// The transfer operator of a span of `tokens` tokens is the scalar exp(lambda_h tokens) per head
// (kernels/transfer_operator.h, Scalar kind): a host value, no kernel needed. Computed in double so that
// long spans compose exactly as cpu::gated_linear_transfer's sum of log decays.
inline float lightning_transfer(float log_decay, int64_t tokens) {
  return static_cast<float>(std::exp(static_cast<double>(log_decay) * static_cast<double>(tokens)));
}

}  // namespace hypic::cuda
