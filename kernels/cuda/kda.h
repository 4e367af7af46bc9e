// Kimi Delta Attention on device (same math as kernels/kda.h), per value head h:
//   S_t = (I - beta_t k_t k_t^T) diag(exp(g_t)) S_{t-1} + beta_t k_t v_t^T,   o_t = S_t^T q_t
// S is [dk, dv] fp32, g_t the per-key-channel log decay (<= 0). q and k are expected l2-normalised and q
// already scaled (the CPU contract). Shapes use GdnShape (same packing convention as gdn_chunked_prefill);
// q/k have Hk heads and value head h reads q/k head h / (H / Hk) (Hk == H for Kimi-Linear and Ring-2.5).
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kernels/cuda/delta_rule.h"
#include "kernels/cuda/types.h"

namespace hypic::cuda {

// Bytes of device workspace kda_chunked_prefill needs (layout in kernels/cuda/kda_common.cuh): per value
// head and chunk slot (T / 64 + N + 1 slots) three 64 x DK bf16 tiles of decayed keys and queries, two
// 64 x 64 bf16 tiles (the UT inverse times diag(beta), the causal query-key weights) and DK fp32 decays;
// DK = dk padded to 64 or 128. For H 32, dk 128: ~26 KB per token (~215 MB at 8192 tokens, ~860 MB at 32768).
size_t kda_chunked_workspace_bytes(const GdnShape& s);

// Chunked prefill (chunk 64, UT transform), two launches: kda_prep (parallel over chunks x heads) and the
// chunk walk (sequential over chunks, parallel over heads x 32-column blocks).
//   q, k:       [T, Hk, dk] bf16           v: [T, H, dv] bf16
//   g:          [T, H, dk] fp32 (log decay per key channel, <= 0)      beta: [T, H] fp32
//   cu_seqlens: [N + 1] int32 on the device, token offsets of the packed sequences (null when N == 1);
//               max_seqlen: the longest sequence (host value)
//   state:      [N, H, dk, dv] fp32, in/out: the initial state, replaced by the final state; may be null
//               when only the transfer operator is wanted (then out must be null)
//   out:        [T, H, dv] bf16, or null
//   transfer:   [N, H, dk, dk] fp32 in/out, or null. When given it is left-multiplied by the sequence's
//               transfer operator A_T ... A_1, A_t = (I - beta_t k_t k_t^T) diag(exp(g_t)) (pass the identity
//               to start a span), exactly as cpu::kda_transfer.
//   workspace:  kda_chunked_workspace_bytes(s) bytes of device memory
// Throws UnsupportedShape for dk > 128 or inconsistent heads.
void kda_chunked_prefill(const GdnShape& s, const bf16* q, const bf16* k, const bf16* v, const float* g,
                         const float* beta, const int32_t* cu_seqlens, int64_t max_seqlen, float* state, bf16* out,
                         float* transfer, void* workspace, cudaStream_t stream);

// Recurrent form for decode (and short spans): s.N independent sequences of s.T tokens EACH.
//   q, k: [N, T, Hk, dk] bf16; v: [N, T, H, dv] bf16; g: [N, T, H, dk] fp32; beta: [N, T, H] fp32;
//   state: [N, H, dk, dv] fp32 in/out; out: [N, T, H, dv] bf16 or null. dk <= 128.
//   states (optional): [N] device array of pointers to each sequence's own [H, dk, dv] state, used instead
//   of `state`.
void kda_recurrent(const GdnShape& s, const bf16* q, const bf16* k, const bf16* v, const float* g, const float* beta,
                   float* state, bf16* out, cudaStream_t stream, float* const* states = nullptr);

}  // namespace hypic::cuda
