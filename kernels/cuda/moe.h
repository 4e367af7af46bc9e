// Mixture-of-experts on device: top-k routing, grouping of token rows by expert, grouped expert GEMMs
// (one cuBLAS grouped-batched call per projection, no per-token or per-expert tiny launches), and the
// weighted combine. Same math as the CPU forward pass (runtime/cpu_backend.cc ffn): softmax over the
// router logits, top-k (ties to the lower expert id), optional renormalisation of the k weights.
//
// A layer's MoE is: moe_route -> moe_plan -> moe_gather -> moe_grouped_gemm (gate_up) -> swiglu ->
// moe_grouped_gemm (down) -> moe_combine.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kernels/cuda/gemm.h"
#include "kernels/cuda/types.h"

namespace hypic::cuda {

// logits: [T, E] fp32 router outputs; ids: [T, K] int32; weights: [T, K] fp32 (softmax probabilities of the
// chosen experts, divided by their sum when normalize). E <= 1024, K <= E.
void moe_route(const float* logits, int64_t T, int64_t E, int64_t K, bool normalize, int32_t* ids, float* weights,
               cudaStream_t stream);

// Grouping of the T*K (token, slot) pairs into expert-contiguous rows.
struct MoePlan {
  int32_t* counts;    // [E] rows per expert (device)
  int32_t* offsets;   // [E + 1] first row of each expert (device)
  int32_t* rank;      // [T * K] scratch
  int32_t* src_token; // [T * K] token of each grouped row
  int32_t* slot_row;  // [T * K] grouped row of each (token, slot)
};
size_t moe_plan_workspace_bytes(int64_t T, int64_t K, int64_t E);
MoePlan moe_plan_from_workspace(void* workspace, int64_t T, int64_t K, int64_t E);

// Fills the plan from ids and copies the per-expert counts to counts_host ([E] host memory). Synchronises
// the stream once: the grouped GEMM needs the group sizes on the host. A null counts_host fills the plan
// on the device only (no copy, no synchronisation).
void moe_plan(const int32_t* ids, int64_t T, int64_t K, int64_t E, const MoePlan& plan, int32_t* counts_host,
              cudaStream_t stream);

// The device-only plan (moe_plan with counts_host = null) and moe_small.h's moe_expert_list in one launch:
// the same counts, offsets and expert list; the rows within an expert may come in another order (both
// place them by atomics). experts: [slots] int32, slots <= E (moe_expert_list's contract).
void moe_plan_device(const int32_t* ids, int64_t T, int64_t K, int64_t E, const MoePlan& plan, int32_t* experts,
                     int64_t slots, cudaStream_t stream);

// The device-only plan and moe_tiled.h's moe_tile_list in one launch: the same counts and offsets, and
// tiles [slots] int2 (expert, first grouped row) of tile_rows rows each in expert order, then (-1, 0) in
// the unused slots; slots >= T*K / tile_rows + E (moe_tile_slots). Rows within an expert may come in
// another order than moe_plan's (placed by atomics).
void moe_plan_tiles_device(const int32_t* ids, int64_t T, int64_t K, int64_t E, const MoePlan& plan, int2* tiles,
                           int64_t slots, int64_t tile_rows, cudaStream_t stream);

// xs[r, :] = x[src_token[r], :]; x: [T, D] bf16; xs: [T*K, D] bf16.
void moe_gather(const bf16* x, int64_t T, int64_t K, int64_t D, const MoePlan& plan, bf16* xs, cudaStream_t stream);

// For every expert e with counts_host[e] > 0: ys[rows of e] = xs[rows of e] W_e^T, W_e: [N, Kd] bf16 at
// expert_weights[e] (a HOST array of E device pointers); xs: [T*K, Kd] bf16, ys: [T*K, N] bf16.
// One cublasGemmGroupedBatchedEx call (bf16 in, fp32 accumulate).
void moe_grouped_gemm(Blas& blas, const bf16* xs, int64_t Kd, const bf16* const* expert_weights, int64_t N,
                      const int32_t* counts_host, int64_t E, bf16* ys, cudaStream_t stream);

// out[t, :] (+)= sum_k weights[t, k] * ys[slot_row[t * K + k], :]  (fp32 sum, bf16 out [T, D]).
void moe_combine(const bf16* ys, int64_t T, int64_t K, int64_t D, const MoePlan& plan, const float* weights,
                 bf16* out, bool accumulate, cudaStream_t stream);

// moe_combine into a bf16 row, then model_glue.h's residual_add, in one pass (the same rounding):
//   h[t, :] += bf16(sum_k weights[t, k] * ys[slot_row[t * K + k], :]) + g_t * shared[t, :]
// h: [T, D] fp32; shared: [T, D] bf16 or null (no shared expert); g_t = sigmoid(shared_gate[t]) or 1 (null).
void moe_combine_residual(const bf16* ys, int64_t T, int64_t K, int64_t D, const MoePlan& plan, const float* weights,
                          float* h, const bf16* shared, const float* shared_gate, cudaStream_t stream);

// moe_combine_residual, then the new rows normed into x as cuda::rmsnorm(h, x, T, D, norm_w, eps, zero_centred)
// would (the same bits), in one pass. x: [T, D] bf16; norm_w: [D] fp32. Returns false, launching nothing, where
// the one-pass form does not apply (D % 256 != 0 or D > 8192, rows or weights not 16-byte aligned): the caller
// runs the two ops.
bool moe_combine_residual_norm(const bf16* ys, int64_t T, int64_t K, int64_t D, const MoePlan& plan,
                               const float* weights, float* h, const bf16* shared, const float* shared_gate,
                               const float* norm_w, float eps, bool zero_centred, bf16* x, cudaStream_t stream);

}  // namespace hypic::cuda
