// MoE routing by sigmoid scores with an expert bias and group-limited top-k (Ring-linear, Kimi-Linear,
// Ring-2.5; DeepSeek-V3's scheme). The CPU reference of kernels/cuda/family_glue.h's
// moe_route_sigmoid_group.
#pragma once
#include <cstdint>

namespace hypic::cpu {

// Per token t: score_e = sigmoid(logits[t, e]), choice_e = score_e + bias[e]. With groups > 1 the groups
// (E / groups consecutive experts) are ranked by the sum of their two largest choices (ties: lower
// group) and the experts outside the best topk_group groups get choice -inf (mask_inf: DeepSeek-V3,
// Kimi) or 0 (Ring's reference). The top k experts by choice are taken in order (ties: lower index);
// weights[t, j] = score of the j-th pick, divided by the picks' score sum if renormalise, times scale.
//   logits: [T, E]; bias: [E]; ids: [T, K] int32; weights: [T, K]. E % groups == 0, K <= E.
void moe_route_sigmoid_group(const float* logits, const float* bias, int64_t T, int64_t E, int64_t K, int64_t groups,
                             int64_t topk_group, bool mask_inf, bool renormalise, float scale, int32_t* ids,
                             float* weights);

}  // namespace hypic::cpu
