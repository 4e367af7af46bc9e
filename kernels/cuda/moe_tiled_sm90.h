// The Hopper-native form of moe_tiled.h's two expert GEMMs (kernels/cuda/moe_tiled_sm90.cu): wgmma from
// shared memory, the weights by bulk tensor copies (TMA), the grouped rows by cp.async through the plan, a
// producer warpgroup and two consumer warpgroups in a persistent grid. moe_tiled_gate_up and moe_tiled_down
// call it by themselves where it applies; this header is for them, the op tests and the benches.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/types.h"

namespace hypic::cuda {

// Where the Hopper forms run: the current device of compute capability 9.0, HYPIC_CUDA_MOE_SM90 not set to
// 0 (that keeps the mma.sync kernels, for A/B runs), and the layer's shape: gate/up needs D % 64 == 0 and
// I % 128 == 0, down D % 256 == 0 and I % 64 == 0.
bool moe_tiled_sm90_gate_up_applies(int64_t D, int64_t I);
bool moe_tiled_sm90_down_applies(int64_t D, int64_t I);

// Same arguments and results as moe_tiled_gate_up / moe_tiled_down (moe_tiled.h).
void moe_tiled_sm90_gate_up(const bf16* x, int64_t D, const int32_t* src_rows, const int32_t* offsets, int64_t E,
                            const int2* tiles, int64_t slots, const bf16* gate_up, int64_t I, bf16* act,
                            cudaStream_t stream);
void moe_tiled_sm90_down(const bf16* act, int64_t I, const int32_t* offsets, int64_t E, const int2* tiles,
                         int64_t slots, const bf16* down, int64_t D, bf16* ys, cudaStream_t stream);

}  // namespace hypic::cuda
