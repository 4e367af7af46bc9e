// Mixture-of-experts for a few token rows (decode, short continuations) with no host round trip: every
// routed (token, slot) row reads its expert id on the device, straight from moe_route's output, so a
// layer needs no synchronisation (the grouped path of moe.h must copy the group sizes to the host) and
// a decode step can be captured in a CUDA graph. The kernels are GEMVs over the experts' contiguous
// weight blocks: each weight row is read once per routed row, which is what bounds decode anyway.
// Same math as moe.h: act = silu(gate . x) * (up . x) kept in bf16, then the weighted down projection.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/types.h"

namespace hypic::cuda {

// act[t*K + k, i] = silu(G_e[i] . x_t) * (U_e[i] . x_t), e = ids[t*K + k]
//   x:       [T, D] bf16, rows ldx elements apart
//   ids:     [T, K] int32 (device), each in [0, E)
//   gate_up: [E, 2I, D] bf16, per expert the I gate rows then the I up rows
//   act:     [T*K, I] bf16
// Requires D % 8 == 0 and ldx % 8 == 0 (16-byte rows); throws UnsupportedShape otherwise.
void moe_small_gate_up(const bf16* x, int64_t T, int64_t ldx, int64_t D, const int32_t* ids, int64_t K,
                       const bf16* gate_up, int64_t I, bf16* act, cudaStream_t stream);

// y[t, :] = sum_k weights[t*K + k] * (W_e act[t*K + k]), e = ids[t*K + k]   (fp32 sum, bf16 out)
//   act: [T*K, I] bf16; weights: [T, K] fp32; down: [E, D, I] bf16; y: [T, D] bf16.
// Requires I % 8 == 0 and K * I <= 16384 (the token's activations live in shared memory).
void moe_small_down_combine(const bf16* act, int64_t T, int64_t K, int64_t I, const int32_t* ids,
                            const float* weights, const bf16* down, int64_t D, bf16* y, cudaStream_t stream);

// Expert-major form for a few dozen rows (continuous-batching decode): each routed expert's weights are
// read once for every row routed to it, instead of once per row, with no host round trip either. The
// rows come grouped by expert (moe.h: moe_plan with counts_host = null, then moe_gather), and the
// results go back through moe_combine.
//   moe_expert_list: experts[j] = the j-th expert with rows (by id), -1 past the last; experts: [slots]
//     int32 with slots = min(E, T*K) (every launch below is sized by slots, so a captured graph serves any
//     routing); offsets: the plan's [E + 1]. E <= 1024.
//   moe_grouped_gate_up: act[r, i] = silu(G_e[i] . xs[r]) * (U_e[i] . xs[r]) for each grouped row r of
//     expert e; xs: [T*K, D] bf16 (grouped); gate_up: [E, 2I, D] bf16; act: [T*K, I] bf16 (grouped).
//   moe_grouped_down: ys[r, :] = W_e act[r] for each grouped row r; down: [E, D, I]; ys: [T*K, D] bf16.
// Requires D % 8 == 0 and I % 8 == 0 (16-byte rows).
void moe_expert_list(const int32_t* offsets, int64_t E, int64_t slots, int32_t* experts, cudaStream_t stream);
void moe_grouped_gate_up(const bf16* xs, int64_t D, const int32_t* offsets, const int32_t* experts, int64_t slots,
                         const bf16* gate_up, int64_t I, bf16* act, cudaStream_t stream);
void moe_grouped_down(const bf16* act, int64_t I, const int32_t* offsets, const int32_t* experts, int64_t slots,
                      const bf16* down, int64_t D, bf16* ys, cudaStream_t stream);

}  // namespace hypic::cuda
