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

// The decode step of a layer with a shared expert (one token, softmax top-k router): routing, the routed
// experts and the shared expert's down projection in two launches, with no routing kernel and no
// separate shared-down product between them. The two kernels each pick the experts from the logits
// themselves (moe_route's math, bit for bit) and the down kernel reads its weights before waiting on
// the gate/up kernel (programmatic launch), so its memory latency hides behind that kernel's tail.
//   act     = moe_small_gate_up of x through the chosen experts       [K, I] bf16 (scratch, also output)
//   h[n]   += bf16(sum_k w_k (W_k act_k)[n]) + g * bf16((W_s shared_act)[n]),  g = sigmoid(*shared_gate) or 1
// which is moe_route + moe_small_gate_up + moe_small_down_combine + gemv's MoeResidual bit for bit.
struct MoeDecodeArgs {
  const float* logits = nullptr;     // [E] fp32 router logits of the token
  int64_t E = 0, K = 0;
  bool normalize = false;            // renormalise the K weights (norm_topk_prob)
  const bf16* x = nullptr;           // [D] the normed input row
  int64_t D = 0;
  const bf16* gate_up = nullptr;     // [E, 2I, D]
  int64_t I = 0;
  bf16* act = nullptr;               // [K, I]
  const bf16* down = nullptr;        // [E, D, I]
  const bf16* shared_act = nullptr;  // [Is] the shared expert's SwiGLU output
  const bf16* shared_down = nullptr; // [D, Is]
  int64_t Is = 0;
  const float* shared_gate = nullptr;  // one logit, or null for an ungated shared expert
  float* h = nullptr;                // [D] fp32 residual stream (in/out)
  int32_t* ids = nullptr;            // optional [K] the chosen experts (with weights [K] fp32)
  float* weights = nullptr;
};
// Shapes moe_decode takes: E <= 1024, K <= min(E, 32), D % 8 == 0, I and Is multiples of 256 with
// K*I + Is <= 24576 (the activations in shared memory).
bool moe_decode_supported(int64_t E, int64_t K, int64_t D, int64_t I, int64_t Is);
void moe_decode(const MoeDecodeArgs& args, cudaStream_t stream);

}  // namespace hypic::cuda
