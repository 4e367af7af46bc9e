// Device buffers of one pass of CudaModel over T rows (tokens): the fp32 residual stream, the normed
// sublayer input and every intermediate the layers need, from the model's scratch pool. The layer
// building blocks of CudaModel read and write them by row, so a caller (the stitch, the isolated segment
// prefill) can drive its own layer loop over the same rows.
#pragma once
#include <cstdint>

#include "kernels/cuda/memory.h"
#include "kernels/cuda/types.h"
#include "runtime/error.h"

namespace hypic {

struct CudaActivations {
  int64_t T = 0;
  cuda::DeviceBuffer ids, pos;  // int32 [T], int64 [T] (global positions)
  cuda::DeviceBuffer h;         // fp32 [T, D]: the residual stream
  cuda::DeviceBuffer x;         // bf16 [T, D]: the normed input of a sublayer
  // Linear layers (Gated DeltaNet; lightning and KDA use the same names: qkv the projection before the
  // conv, q / k / v the recurrence's inputs, g the decay (KDA: [T, H, dk]), z the output gate's input,
  // o the recurrence's output, gdn_ws the chunked kernel's workspace; lowr KDA's low-rank gate input).
  cuda::DeviceBuffer qkv, conv, z, ba, q, k, v, g, beta, o, gdn_ws, lowr;
  cuda::DeviceBuffer arrivals;  // int32 [T, Hk]: gdn_conv_recurrent_rows' counters, zero between its launches
  // Attention.
  cuda::DeviceBuffer qg, aq, kn, vn, att;  // kn, vn: this pass's keys (normed, rotated) and values
  // MLA: the latent [c | k_rope] rows, the normed c, the decompressed k_nope | v, the per-head gate.
  cuda::DeviceBuffer lat, latc, kvb, hgate;
  // Dense MLP.
  cuda::DeviceBuffer gu;
  // MoE.
  cuda::DeviceBuffer router, sel, wts, plan_ws, xs, egu, eact, ys, y, sgu, sh, sg;
  cuda::DeviceBuffer moe_list;  // int32 [min(E, T*K)]: the routed experts (expert-major path)
  cuda::DeviceBuffer moe_tiles; // int2 [moe_tile_slots(T*K, E)]: the row tiles (tiled path, moe_tiled.h)
  cuda::DeviceBuffer moe_barrier;  // uint64 [1]: cuda::moe_layer_decode's grid-barrier count (one row; zeroed once)

  // One-row passes (decode) defer a sublayer's input norm into the products that read it (cuda::gemv
  // norms h itself): the norm weights wait here until then, and x is not written before.
  const float* norm_pending = nullptr;
  // Prefill: the MoE's residual add may also norm the new h into x with the next sublayer's weights (one pass);
  // those weights wait here, and that sublayer's norm, finding them, has nothing left to do.
  const float* x_normed_with = nullptr;

  float* hp() const { return h.as<float>(); }
  cuda::bf16* xp() const {
    HYPIC_ASSERT(norm_pending == nullptr, "the normed input was read before its deferred norm ran");
    return x.as<cuda::bf16>();
  }
  const int64_t* posp() const { return pos.as<int64_t>(); }
};

}  // namespace hypic
