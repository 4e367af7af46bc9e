// The Hopper-native form of attention_prefill (kernels/cuda/attention_prefill_sm90.cu): head dim 256, TMA
// and wgmma, sm_90a. attention_prefill and attention_prefill_split call it by themselves where it applies;
// this header is for them, the op tests and the benches.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/attention.h"

namespace hypic::cuda {

// True where the Hopper form runs: d == 256, at least one query and one key, the current device of compute
// capability 9.0, and HYPIC_CUDA_ATTN_SM90 not set to 0 (that keeps the mma.sync form, for A/B runs).
bool attention_prefill_sm90_applies(const AttentionShape& s);

// The split count for the Hopper form (one block an SM): what attention_prefill_splits returns where it applies.
int64_t attention_prefill_sm90_splits(const AttentionShape& s, int sm_count);

// Same arguments as attention_prefill (q, k, v 16-byte aligned, checked by the caller); splits > 1 writes the
// split form's partial rows to part_o [Tq * Hq, splits, 256] and part_ml [Tq * Hq, splits, 2] (fp32) instead
// of `out`, for the combine pass.
void attention_prefill_sm90(const AttentionShape& s, const bf16* q, const bf16* k, const bf16* v, const int64_t* q_pos,
                            const int64_t* k_pos, float scale, bf16* out, cudaStream_t stream, int64_t splits,
                            float* part_o, float* part_ml);

}  // namespace hypic::cuda
