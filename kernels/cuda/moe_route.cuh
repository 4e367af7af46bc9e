// The softmax top-k router of one token as a warp-level device function, shared by moe_route's kernel and
// the decode MoE kernels that route for themselves (moe_small.h: moe_decode), so both pick the same
// experts with the same weights bit for bit. Same math as the CPU forward pass: softmax over the E
// logits, K rounds of arg-max (ties to the lower id), optional renormalisation of the K weights.
#pragma once
#include <cuda_runtime.h>

#include <climits>
#include <cstdint>

#include "kernels/cuda/device_util.cuh"

namespace hypic::cuda::detail {

// The widest router a lane's registers hold: PerLane experts per lane, E <= 32 * PerLane.
constexpr int kRouteMaxE = 1024;

// Called by all 32 lanes of a warp with the token's logits [E] (read through L2: they are written by
// the kernel before). Lane j < K receives the j-th chosen expert and its weight; other lanes' outputs
// are unspecified. K <= 32, K <= E <= 32 * PerLane. (Extra PerLane slots past E add zeros to the sums,
// so every PerLane gives the same bits.)
template <int PerLane>
__device__ __forceinline__ void route_warp(const float* __restrict__ logits, int E, int K, bool normalize,
                                           int lane, int32_t& id_out, float& w_out) {
  float val[PerLane];
  float mx = -INFINITY;
#pragma unroll
  for (int r = 0; r < PerLane; ++r) {
    const int e = r * 32 + lane;
    val[r] = e < E ? __ldcg(logits + e) : -INFINITY;
    mx = fmaxf(mx, val[r]);
  }
  mx = warp_max(mx);
  float sum = 0.0f;
#pragma unroll
  for (int r = 0; r < PerLane; ++r) {
    const int e = r * 32 + lane;
    val[r] = e < E ? expf(val[r] - mx) : 0.0f;
    sum += val[r];
  }
  sum = warp_sum(sum);
  // Each round picks the largest key over the warp with two single-instruction reductions: key =
  // bits(p) + 1 (non-negative floats order as their bits; 0 marks a chosen or absent expert, below any
  // probability, even 0), then the lowest id among the lanes holding that key. A lane's candidate is its
  // own lowest id of its largest key, so this is "largest p, ties to the lower id" as a scan would be.
  unsigned key[PerLane];
#pragma unroll
  for (int r = 0; r < PerLane; ++r) key[r] = r * 32 + lane < E ? __float_as_uint(val[r]) + 1u : 0u;
  float chosen_sum = 0.0f, my_w = 0.0f;
  int my_id = 0;
  for (int j = 0; j < K; ++j) {
    unsigned best = 0u;
    int bid = INT_MAX;
#pragma unroll
    for (int r = 0; r < PerLane; ++r)
      if (key[r] > best) {  // strict: the lowest id wins among a lane's equal keys
        best = key[r];
        bid = r * 32 + lane;
      }
    const unsigned top = __reduce_max_sync(0xffffffffu, best);
    bid = int(__reduce_min_sync(0xffffffffu, best == top ? unsigned(bid) : unsigned(INT_MAX)));
    const float p = __uint_as_float(top - 1u) / sum;
    chosen_sum += p;
    if (lane == j) {
      my_id = bid;
      my_w = p;
    }
#pragma unroll
    for (int r = 0; r < PerLane; ++r)
      if (r * 32 + lane == bid) key[r] = 0u;
  }
  id_out = my_id;
  w_out = normalize ? my_w / chosen_sum : my_w;
}

}  // namespace hypic::cuda::detail
