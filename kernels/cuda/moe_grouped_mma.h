// Expert-major MoE products on tensor cores, for the row counts between a decode step and a long
// prefill (a stitch's few hundred tokens, a batched decode step): every routed expert's weights are read
// once from memory for all its grouped rows, with bf16 mma.sync, and the group sizes stay on the device
// (no host round trip, so the layer can be captured in a CUDA graph). Same inputs, outputs and math as
// moe_grouped_gate_up / moe_grouped_down of moe_small.h (fp32 accumulation, the activation rounded to
// bf16 once), which remain for shapes these kernels do not take.
//
// A pass of one expert covers up to 32 of its grouped rows; an expert with more rows takes several passes,
// its weight slice then coming from L2. Many rows per expert (a long prefill) is the grouped GEMM's
// regime (moe.h: moe_grouped_gemm).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/types.h"

namespace hypic::cuda {

// Whether the kernels below take a layer of hidden size D and expert width I (both multiples of 32).
bool moe_grouped_mma_supported(int64_t D, int64_t I);

// act[r, i] = silu(G_e[i] . xs[r]) * (U_e[i] . xs[r]) for each grouped row r of expert e
//   xs:       [T*K, D] bf16, rows grouped by expert (moe.h: moe_plan, moe_gather), 16-byte aligned
//   offsets:  [E + 1] int32 (device), rows of expert e are offsets[e] .. offsets[e + 1] - 1
//   experts:  [slots] int32 (device), the experts with rows, -1 past the last (moe_small.h: moe_expert_list)
//   gate_up:  [E, 2I, D] bf16, per expert the I gate rows then the I up rows
//   act:      [T*K, I] bf16 (grouped)
//   src_rows: optional [T*K] int32 (device): grouped row r is then row src_rows[r] of xs, which is the
//             ungathered input [T, D] (the plan's src_token: no moe_gather before this)
void moe_grouped_gate_up_mma(const bf16* xs, int64_t D, const int32_t* offsets, const int32_t* experts,
                             int64_t slots, const bf16* gate_up, int64_t I, bf16* act, cudaStream_t stream,
                             const int32_t* src_rows = nullptr);

// ys[r, :] = W_e act[r] for each grouped row r of expert e
//   act: [T*K, I] bf16 (grouped), 16-byte aligned; down: [E, D, I] bf16; ys: [T*K, D] bf16 (grouped).
void moe_grouped_down_mma(const bf16* act, int64_t I, const int32_t* offsets, const int32_t* experts,
                          int64_t slots, const bf16* down, int64_t D, bf16* ys, cudaStream_t stream);

}  // namespace hypic::cuda
