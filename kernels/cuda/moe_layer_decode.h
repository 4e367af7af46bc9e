// The whole MoE sublayer of one token (decode, batch 1) in one launch: the input rmsnorm, the router, the
// shared expert's gate/up with its SwiGLU and its gate logit, the softmax top-k routing, the routed experts'
// gate/up, every down row (routed and shared) and the residual add. It does the work of cuda::gemv (normed
// input; router, shared SwiGLU and gate targets) followed by cuda::moe_decode, with the same sums in the same
// orders, so it gives the same bits.
//
// Why one launch: at batch 1 those three kernels are a chain of dependent launches, each filling the SMs'
// register files, so a kernel's blocks only become resident as the blocks before them leave and the down
// rows cannot be read while the gate/up rows stream. Here one block an SM stays resident across three
// phases separated by grid-wide barriers (a counter in global memory): (1) norm, router and shared expert,
// (2) routing and the routed gate/up rows, while the block's down rows (known once the routing is) are
// copied into its shared memory, (3) the down rows from shared memory and the residual add.
//
// Every block of the grid must be resident at once (the barriers wait for all of them): the launch is one
// block of 512 threads per SM, and its programmatic successor is let start only after the first barrier.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/types.h"

namespace hypic::cuda {

struct MoeLayerDecodeArgs {
  float* h = nullptr;               // [D] fp32 residual stream: normed as input, the MoE's output added in place
  const float* norm_w = nullptr;    // [D] the sublayer's rmsnorm weights
  float eps = 1e-6f;
  bool zero_centred = false;        // the norm scales by 1 + w
  bf16* x = nullptr;                // [D] the normed row (written, as cuda::gemv's x_out)
  int64_t D = 0;
  const bf16* router = nullptr;     // [E, D]
  float* logits = nullptr;          // [E] fp32 router logits (written)
  int64_t E = 0, K = 0;
  bool normalize = false;           // renormalise the K weights (norm_topk_prob)
  const bf16* shared_gate_up = nullptr;  // [2 Is, D]: the Is gate rows, then the Is up rows
  bf16* shared_act = nullptr;       // [Is] the shared expert's SwiGLU output (written)
  const bf16* shared_gate_w = nullptr;   // [D] the shared expert's gate row, or null for an ungated one
  float* shared_gate = nullptr;     // [1] its logit (written; needed when shared_gate_w is set)
  const bf16* shared_down = nullptr;     // [D, Is]
  int64_t Is = 0;
  const bf16* gate_up = nullptr;    // [E, 2I, D], per expert the I gate rows then the I up rows
  const bf16* down = nullptr;       // [E, D, I]
  int64_t I = 0;
  bf16* act = nullptr;              // [K, I] the routed SwiGLU outputs (written)
  int32_t* ids = nullptr;           // optional [K] the chosen experts, with weights [K] fp32
  float* weights = nullptr;
  // One 64-bit counter, zero before the first launch that uses it; the grid barriers only ever add to it
  // (each launch by twice the grid), so it needs no reset. Launches sharing it must be stream-ordered.
  unsigned long long* barrier = nullptr;
};

// Shapes it takes on the current device: E <= 1024, 0 < K <= min(E, 32), 1024 <= D <= 2048 with D % 256 == 0
// (cuda::gemv's normed form, a row's pieces in registers), I and Is multiples of 256, at most 16 down rows and
// 16 first-phase rows a block (D and E + Is + 1 up to 16x the SM count), and the block's down rows, the
// activations and the normed row within the device's shared memory per block.
bool moe_layer_decode_supported(int64_t E, int64_t K, int64_t D, int64_t I, int64_t Is);
void moe_layer_decode(const MoeLayerDecodeArgs& args, cudaStream_t stream);

}  // namespace hypic::cuda
