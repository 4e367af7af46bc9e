// Softmax attention on device with grouped KV heads, causal by global position: key j is visible to
// query i iff k_pos[j] <= q_pos[i] (keys may come from several cached segments plus fresh tokens, in
// any order). Same math as kernels/attention.h; a query that sees no key gets a zero output.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kernels/cuda/kv_cache.h"
#include "kernels/cuda/types.h"

namespace hypic::cuda {

struct AttentionShape {
  int64_t Tq;   // query rows
  int64_t Tk;   // key/value rows
  int64_t Hq;   // query heads
  int64_t Hkv;  // key/value heads (Hq % Hkv == 0; query head h reads kv head h / (Hq / Hkv))
  int64_t d;    // head dim of q, k and v (d % 8 == 0, d <= 256)
};

// Flash-style prefill (online softmax, 128 query rows x 64-key tiles streamed by cp.async, mma.sync
// bf16 tensor cores, fp32 accumulation).
//   q: [Tq, Hq, d] bf16; k, v: [Tk, Hkv, d] bf16; q_pos: [Tq] int64; k_pos: [Tk] int64 (device);
//   out: [Tq, Hq, d] bf16. scale multiplies q.k (usually 1/sqrt(d)). q, k, v and out must be 16-byte
//   aligned (UnsupportedShape otherwise).
// Key tiles whose every position lies after the block's last query are skipped; per-element masks are
// applied only to tiles whose positions straddle a warp's queries.
// Head dim 256 on compute capability 9.0 takes the Hopper form instead (TMA + wgmma, same arguments and
// results; kernels/cuda/attention_prefill_sm90.h), here and in attention_prefill_split.
void attention_prefill(const AttentionShape& s, const bf16* q, const bf16* k, const bf16* v, const int64_t* q_pos,
                       const int64_t* k_pos, float scale, bf16* out, cudaStream_t stream);

// Split form for few query rows over many keys (the stitch's seams and question over every cached key):
// the key tiles of each 128-row query tile are cut into `splits` ranges, one block each, and a combine pass
// merges their partial softmaxes. Same arguments as attention_prefill, plus
//   splits: 1..kMaxPrefillSplits (attention_prefill_splits(s, SMs) picks up to two blocks per SM without a
//           partial wave, one for the Hopper form, at least 4 key tiles per split; 1 is attention_prefill itself);
//   workspace: attention_prefill_workspace_bytes(s, splits) bytes of device memory (none for 1 split),
//           fp32 [Tq * Hq, splits, padded d + 2].
// CudaModel::attention_core calls it for every prefill-sized pass (a split count of 1 where the query tiles
// alone fill the device). On the H200, 256 queries over 8k / 32k cached keys: 0.54 -> 0.23 ms, 2.12 -> 0.83 ms.
constexpr int64_t kMaxPrefillSplits = 64;
int64_t attention_prefill_splits(const AttentionShape& s, int sm_count);
size_t attention_prefill_workspace_bytes(const AttentionShape& s, int64_t splits);
void attention_prefill_split(const AttentionShape& s, const bf16* q, const bf16* k, const bf16* v,
                             const int64_t* q_pos, const int64_t* k_pos, float scale, int64_t splits, void* workspace,
                             bf16* out, cudaStream_t stream);

// Decode form for few query rows (split over the keys, flash-decoding style, then a combine pass).
// Same arguments; workspace: attention_decode_workspace_bytes(s) bytes of device memory.
// keys_dev (optional, device int32): only the first min(*keys_dev, s.Tk) keys are read. s.Tk is then the
// cache's capacity and fixes the launch and the workspace, so a captured CUDA graph stays valid while the
// cache fills up within that capacity.
size_t attention_decode_workspace_bytes(const AttentionShape& s);
void attention_decode(const AttentionShape& s, const bf16* q, const bf16* k, const bf16* v, const int64_t* q_pos,
                      const int64_t* k_pos, float scale, bf16* out, void* workspace, cudaStream_t stream,
                      const int32_t* keys_dev = nullptr);
// The decode form for N sequences with one query row each, each over its own cache (continuous batching:
// the caches live in separate buffers of different lengths).
//   s.Tq = N; s.Tk: the launch bound, >= every slots[i].rows (fixes the split count and the workspace,
//   attention_decode_workspace_bytes(s), so a captured graph stays valid while the caches fill up to it);
//   q: [N, Hq, d] bf16; slots: [N] on the device (kernels/cuda/kv_cache.h), sequence i reads keys
//   [0, min(slots[i].rows, s.Tk)) of its cache; q_pos: [N] int64; out: [N, Hq, d] bf16.
// Launched programmatically in a decode step, it reads every cache row but the new one (slots[i].rows - 1)
// before its wait (HYPIC_CUDA_DECODE_ATTN_WAVE=0: after it): the kernels that may still run may write only
// that row (the append), the queries and their own outputs, never an older cache row.
void attention_decode_batched(const AttentionShape& s, const bf16* q, const KvSlot* slots, const int64_t* q_pos,
                              float scale, bf16* out, void* workspace, cudaStream_t stream);

// A batched step's new rows as the products left them, before the query/key norms and the rotation:
// attention_decode_batched given them does qk_norm_rope's work (with the append) itself, bit for bit, so that
// kernel is not launched. Where it applies (attention_decode_folds: 8 query heads a kv head, d 128 or 256, a
// rotary half of at most 32; opt-in with HYPIC_CUDA_DECODE_ATTN_FOLD=1: on an H100 no faster than the norm kernel for
// the batch-1 step and 1.7% slower at batch 8), the walk's blocks norm and rotate their
// queries, and the block whose keys hold sequence i's new row (slots[i].rows - 1, dropped past the capacity)
// norms and rotates the key and writes it, the value row and q_pos[i] into the cache.
struct DecodeNewRows {
  const bf16* q_src = nullptr;  // [N, Hq, q_stride]: each head's d query elements first
  int64_t q_stride = 0;
  const bf16* k = nullptr;  // [N, Hkv, d]
  const bf16* v = nullptr;  // [N, Hkv, d]
  const float* q_norm = nullptr;  // [d]
  const float* k_norm = nullptr;  // [d]
  float eps = 0.0f;
  bool zero_centred = false;
  int64_t rot_dim = 0;
  double theta = 0.0;
};
bool attention_decode_folds(int64_t Hq, int64_t Hkv, int64_t d, int64_t rot_dim);
void attention_decode_batched(const AttentionShape& s, const DecodeNewRows& rows, const KvSlot* slots,
                              const int64_t* q_pos, float scale, bf16* out, void* workspace, cudaStream_t stream);

}  // namespace hypic::cuda
