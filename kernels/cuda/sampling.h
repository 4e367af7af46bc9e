// Token selection on device, one block per row of logits.
//   Greedy: the arg-max (ties to the lowest id).
//   Sampling: x = logits / temperature; keep the top_k largest (top_k <= 0: all; ties at the k-th value
//   are all kept); then the smallest set of largest-probability tokens whose mass reaches top_p of the
//   kept mass (top_p >= 1: all); draw from the kept set with u = sampling_uniform(seed, row) by walking the
//   kept tokens in id order. temperature <= 0 means greedy. Thresholds are found exactly by a bitwise
//   search over the order-preserving integer image of the floats (no sort).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>

namespace hypic::cuda {

struct SamplingParams {
  float temperature = 1.0f;
  int32_t top_k = 0;
  float top_p = 1.0f;
  uint64_t seed = 0;
};

// One row's draw for draw_rows: the rule above with the caller's uniform draw u in [0, 1) (instead of
// sampling_uniform), over ids [0, n) only (a vocabulary shorter than the logits row). active == 0: skip.
struct RowDraw {
  float temperature;
  int32_t top_k;
  float top_p;  // (0, 1]
  float u;
  int32_t n;    // 1 <= n <= the row length
  int32_t active;
};

// logits: [B, V] fp32; out: [B] int32.
void argmax_rows(const float* logits, int64_t B, int64_t V, int32_t* out, cudaStream_t stream);
void sample_rows(const float* logits, int64_t B, int64_t V, const SamplingParams& p, int32_t* out,
                 cudaStream_t stream);
// Each row with its own rule and draw: logits [B, ld] fp32 (rows ld apart); rows: [B] RowDraw (device);
// out: [B] int32 (rows not active are left as they are).
void draw_rows(const float* logits, int64_t B, int64_t ld, const RowDraw* rows, int32_t* out, cudaStream_t stream);

// The uniform number in [0, 1) that row `row` draws for `seed` (splitmix64; host and device agree).
__host__ __device__ inline float sampling_uniform(uint64_t seed, uint64_t row) {
  uint64_t z = seed + 0x9e3779b97f4a7c15ull * (row + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return static_cast<float>(z >> 40) * (1.0f / 16777216.0f);  // 24 random bits
}

// Order-preserving map of a float to uint32 (larger float -> larger key).
__host__ __device__ inline uint32_t float_order_key(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

}  // namespace hypic::cuda
