// Gated DeltaNet on device (same math as kernels/delta_rule.h), per value head h:
//   S_t = exp(g_t) (I - beta_t k_t k_t^T) S_{t-1} + beta_t k_t v_t^T,   o_t = S_t^T q_t
// S is [dk, dv] fp32. q and k are expected l2-normalised and q already scaled (the CPU contract).
// Grouped heads: q/k have Hk heads and value head h reads q/k head h / (H / Hk).
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kernels/cuda/types.h"

namespace hypic::cuda {

struct GdnShape {
  int64_t T;   // tokens in total (all sequences, packed)
  int64_t N;   // sequences
  int64_t H;   // value heads
  int64_t Hk;  // q/k heads (H % Hk == 0)
  int64_t dk;  // key dim, <= 128
  int64_t dv;  // value dim
};

// Bytes of device workspace gdn_chunked_prefill needs (layout in kernels/cuda/gdn_common.cuh): per value
// head and chunk slot (T / 64 + N + 1 slots) the WY weights W (64 x dk) and pseudo-values (64 x dv), the
// chunk's start state for the output pass (dk x dv), all bf16, and the decays; dk is padded to 64 or 128,
// dv to a multiple of 64. For H 32, dk = dv = 128: ~33 KB per token (~270 MB at 8192 tokens, ~1.1 GB at 32768).
size_t gdn_chunked_workspace_bytes(const GdnShape& s);

// Chunked prefill (chunk 64, WY/UT form on tensor cores), optionally building the transfer operator of
// every sequence in the same pass.
//   q, k:       [T, Hk, dk] bf16           v: [T, H, dv] bf16
//   g, beta:    [T, H] fp32 (g = log decay, <= 0)
//   cu_seqlens: [N + 1] int32 on the device, token offsets of the packed sequences (null when N == 1);
//               max_seqlen: the longest sequence (host value)
//   state:      [N, H, dk, dv] fp32, in/out: the initial state, replaced by the final state
//   out:        [T, H, dv] bf16, or null when only the state is wanted
//   transfer:   [N, H, dk, dk] fp32 in/out, or null. When given it is left-multiplied by the sequence's
//               transfer operator A_T ... A_1, A_t = exp(g_t)(I - beta_t k_t k_t^T) (pass the identity to
//               start a span), exactly as kernels/cpu delta_rule_transfer.
//   workspace:  gdn_chunked_workspace_bytes(s) bytes of device memory
// Throws UnsupportedShape for dk > 128 or inconsistent heads.
void gdn_chunked_prefill(const GdnShape& s, const bf16* q, const bf16* k, const bf16* v, const float* g,
                         const float* beta, const int32_t* cu_seqlens, int64_t max_seqlen, float* state, bf16* out,
                         float* transfer, void* workspace, cudaStream_t stream);
// Whether gdn_chunked_prefill with these arguments (null or not: q, k, out, transfer; the workspace it would get)
// prepares the chunks beside the state walk on the current device rather than before it (docs/cuda_kernels.md), so
// that tests and benchmarks can tell which form ran. Launches nothing.
bool gdn_chunked_prefill_overlaps(const GdnShape& s, const bf16* q, const bf16* k, const bf16* out, bool transfer,
                                  int64_t max_seqlen, void* workspace);

// gdn_chunked_prefill (outputs and final states, no transfer operator) that also builds, for every sequence n,
// the transfer operator and the zero-start state of its body, the rows after its first lead[n]: the same
// as a second gdn_chunked_prefill over the bodies alone (state only, with transfer), for one extra chunk of
// preparation per sequence instead of a second pass (the body's later chunks share the forward's), and
// the body state from the linearity of the walk, S_end = T(body) S(after the lead) + S(body | 0), instead
// of a walk of its own.
//   lead:       [N] int32 on the device, 0 <= lead[n] <= length of sequence n
//   body_state: [N, H, dk, dv] fp32 out: S(body | 0)
//   transfer:   [N, H, dk, dk] fp32 out: T(body)
//   workspace:  gdn_bodies_workspace_bytes(s) bytes
//   out:        optional: [N] device arrays of pointers to each sequence's own [H, dk, dv] / [H, dk, dk]
//               buffers; a given array receives that result instead of the packed array (body_state),
//               or a copy of it (state, transfer: the packed arrays are written too). Null arrays: none.
// The other arguments are gdn_chunked_prefill's.
struct BodyOutputs {
  float* const* state = nullptr;
  float* const* body = nullptr;
  float* const* transfer = nullptr;
};
size_t gdn_bodies_workspace_bytes(const GdnShape& s);
void gdn_chunked_prefill_with_bodies(const GdnShape& s, const bf16* q, const bf16* k, const bf16* v, const float* g,
                                     const float* beta, const int32_t* cu_seqlens, int64_t max_seqlen,
                                     const int32_t* lead, float* state, bf16* out, float* body_state,
                                     float* transfer, void* workspace, cudaStream_t stream,
                                     const BodyOutputs& out_to = {});
// Recurrent form for decode (and short spans): s.N independent sequences of s.T tokens EACH.
//   q, k: [N, T, Hk, dk] bf16; v: [N, T, H, dv] bf16; g, beta: [N, T, H] fp32;
//   state: [N, H, dk, dv] fp32 in/out; out: [N, T, H, dv] bf16 or null. dk <= 128.
//   states (optional): [N] device array of pointers to each sequence's own [H, dk, dv] state, used instead
//   of `state` (continuous batching: the sequences' states live in separate buffers).
void gdn_recurrent(const GdnShape& s, const bf16* q, const bf16* k, const bf16* v, const float* g, const float* beta,
                   float* state, bf16* out, cudaStream_t stream, float* const* states = nullptr);

// One decode token a row from the layer's qkv projection: gdn_conv_split_rows (its arguments up to eps) then
// gdn_recurrent over one token a row (g, beta: [N, Hv] fp32; state or states, out: as gdn_recurrent's, T = 1), bit
// for bit, in one launch and without q, k and v in memory. arrivals: [N, Hk] int32 on the device, zero before the
// first call and left zero by every call (the blocks of a key head count themselves there, so that the last of
// them advances the q and k tails once every block has read them); calls on one stream may share it. dk <= 128.
void gdn_conv_recurrent_rows(const bf16* qkv, int64_t N, int64_t Hk, int64_t dk, int64_t Hv, int64_t dv,
                             const bf16* conv_w, int64_t K, bf16* tail, bf16* const* tails, float q_scale, float eps,
                             const float* g, const float* beta, float* state, float* const* states, bf16* out,
                             int32_t* arrivals, cudaStream_t stream);

}  // namespace hypic::cuda
