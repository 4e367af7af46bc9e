// Expert-major MoE products for a long prefill (hundreds of rows per expert): shared-memory tiled
// tensor-core GEMMs over the plan's groups. Against moe.h's grouped cuBLAS call they keep the group sizes
// on the device (no host round trip), read the gate/up input rows through the plan (no moe_gather copy)
// and apply SwiGLU to the gate/up tile in registers (no [rows, 2I] intermediate). Same inputs, outputs
// and math as moe_grouped_mma.h (fp32 accumulation, the activation rounded to bf16 once); that file's
// kernels stay the form for few rows per expert (a stitch, a batched decode step).
//
// A layer's MoE on this path: moe_route -> moe_plan (device only) -> moe_tile_list -> moe_tiled_gate_up
// -> moe_tiled_down -> moe_combine (or moe_combine_residual).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/types.h"

namespace hypic::cuda {

// Whether the kernels take a layer of hidden size D and expert width I: D % 128 == 0, I % 64 == 0, and a
// grid of row tiles for R = T*K routed rows over E experts that fits a launch (moe_tile_slots <= 65535).
bool moe_tiled_supported(int64_t D, int64_t I, int64_t R, int64_t E);

// Grouped rows of one expert per row tile (both forms; moe.h's moe_plan_tiles_device takes it).
constexpr int64_t kMoeTileRows = 128;

// Upper bound on the row tiles (kMoeTileRows grouped rows of one expert each) of R rows over E experts.
int64_t moe_tile_slots(int64_t R, int64_t E);

// tiles: [slots] int2 (device), (expert, first grouped row) of each row tile in expert order, (-1, 0) past
// the last; offsets: [E + 1] int32 (device, moe.h's plan); E <= 1024; slots = moe_tile_slots(R, E).
// (moe.h's moe_plan_tiles_device writes the same list with the plan, in one launch.)
void moe_tile_list(const int32_t* offsets, int64_t E, int2* tiles, int64_t slots, cudaStream_t stream);

// act[r, i] = silu(G_e[i] . x[src_rows[r]]) * (U_e[i] . x[src_rows[r]]) for each grouped row r of expert e
//   x:        [T, D] bf16 (ungathered; 16-byte aligned); src_rows: [T*K] int32, the plan's src_token
//   offsets:  [E + 1] int32; tiles: moe_tile_list's [slots]
//   gate_up:  [E, 2I, D] bf16, per expert the I gate rows then the I up rows
//   act:      [T*K, I] bf16 (grouped)
// On an H200 / H100 the Hopper form (moe_tiled_sm90.h) runs where it takes the shape.
void moe_tiled_gate_up(const bf16* x, int64_t D, const int32_t* src_rows, const int32_t* offsets, int64_t E,
                       const int2* tiles, int64_t slots, const bf16* gate_up, int64_t I, bf16* act, cudaStream_t stream);

// ys[r, :] = W_e act[r] for each grouped row r of expert e
//   act: [T*K, I] bf16 (grouped, 16-byte aligned); down: [E, D, I] bf16; ys: [T*K, D] bf16 (grouped).
void moe_tiled_down(const bf16* act, int64_t I, const int32_t* offsets, int64_t E, const int2* tiles, int64_t slots,
                    const bf16* down, int64_t D, bf16* ys, cudaStream_t stream);

}  // namespace hypic::cuda
