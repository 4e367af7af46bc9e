// Attention for few query rows (decode): the keys are split into ranges processed by separate blocks
// (flash-decoding), each warp of a block walks every 4th key of the range with the head dim spread over
// the lanes, and a combine pass merges the partial softmaxes. Memory-bound: K and V are read once.
#include <climits>

#include "kernels/cuda/attention.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/device_util.cuh"

namespace hypic::cuda {
namespace {

constexpr int kWarps = 4;
constexpr int kKeysPerSplit = 512;
constexpr int kMaxSplits = 64;
constexpr int kMaxD = 256;

int64_t num_splits(const AttentionShape& s) {
  int64_t n = (s.Tk + kKeysPerSplit - 1) / kKeysPerSplit;
  return n < 1 ? 1 : (n > kMaxSplits ? kMaxSplits : n);
}

template <int D>
__global__ void __launch_bounds__(kWarps * 32) decode_kernel(AttentionShape s, int64_t splits,
                                                             const bf16* __restrict__ q, const bf16* __restrict__ k,
                                                             const bf16* __restrict__ v,
                                                             const int64_t* __restrict__ q_pos,
                                                             const int64_t* __restrict__ k_pos,
                                                             const int32_t* __restrict__ keys_dev, float scale_log2,
                                                             float* __restrict__ part_o, float* __restrict__ part_ml) {
  constexpr int E = D / 32;  // head-dim elements per lane
  __shared__ float wm[kWarps], wl[kWarps], wo[kWarps][D];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t sp = blockIdx.x, h = blockIdx.y, i = blockIdx.z, kh = h / (s.Hq / s.Hkv);
  const int d = int(s.d);
  const int64_t per = (s.Tk + splits - 1) / splits, j_begin = sp * per;
  const int64_t Tk = keys_dev && int64_t(*keys_dev) < s.Tk ? int64_t(*keys_dev) : s.Tk;
  const int64_t j_end = j_begin + per < Tk ? j_begin + per : Tk;
  const int64_t qp = q_pos[i];
  float qr[E], acc[E];
#pragma unroll
  for (int e = 0; e < E; ++e) {
    const int c = lane * E + e;
    qr[e] = c < d ? __bfloat162float(q[(i * s.Hq + h) * d + c]) * scale_log2 : 0.0f;
    acc[e] = 0.0f;
  }
  float m = -INFINITY, l = 0.0f;
  for (int64_t j = j_begin + warp; j < j_end; j += kWarps) {
    if (k_pos[j] > qp) continue;
    const bf16* kr = k + (j * s.Hkv + kh) * d;
    float dot = 0.0f;
#pragma unroll
    for (int e = 0; e < E; ++e) {
      const int c = lane * E + e;
      if (c < d) dot += qr[e] * __bfloat162float(kr[c]);
    }
    dot = detail::warp_sum(dot);
    const float mn = fmaxf(m, dot), alpha = exp2f(m - mn), p = exp2f(dot - mn);
    m = mn;
    l = l * alpha + p;
    const bf16* vr = v + (j * s.Hkv + kh) * d;
#pragma unroll
    for (int e = 0; e < E; ++e) {
      const int c = lane * E + e;
      acc[e] = acc[e] * alpha + (c < d ? p * __bfloat162float(vr[c]) : 0.0f);
    }
  }
  if (lane == 0) {
    wm[warp] = m;
    wl[warp] = l;
  }
#pragma unroll
  for (int e = 0; e < E; ++e) wo[warp][lane * E + e] = acc[e];
  __syncthreads();
  float M = -INFINITY;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) M = fmaxf(M, wm[w]);
  const int64_t base = (i * s.Hq + h) * splits + sp;
  for (int c = threadIdx.x; c < D; c += blockDim.x) {
    float o = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w)
      if (wm[w] != -INFINITY) o += wo[w][c] * exp2f(wm[w] - M);
    part_o[base * D + c] = o;
  }
  if (threadIdx.x == 0) {
    float L = 0.0f;
    for (int w = 0; w < kWarps; ++w)
      if (wm[w] != -INFINITY) L += wl[w] * exp2f(wm[w] - M);
    part_ml[base * 2] = M;
    part_ml[base * 2 + 1] = L;
  }
}

__global__ void combine_kernel(AttentionShape s, int64_t splits, int D, const float* __restrict__ part_o,
                               const float* __restrict__ part_ml, bf16* __restrict__ out) {
  const int64_t row = blockIdx.x;  // i * Hq + h
  const float* ml = part_ml + row * splits * 2;
  float M = -INFINITY;
  for (int64_t sp = 0; sp < splits; ++sp) M = fmaxf(M, ml[sp * 2]);
  float L = 0.0f;
  for (int64_t sp = 0; sp < splits; ++sp)
    if (ml[sp * 2] != -INFINITY) L += ml[sp * 2 + 1] * exp2f(ml[sp * 2] - M);
  const float inv = L > 0.0f ? 1.0f / L : 0.0f;
  for (int c = threadIdx.x; c < s.d; c += blockDim.x) {
    float o = 0.0f;
    for (int64_t sp = 0; sp < splits; ++sp)
      if (ml[sp * 2] != -INFINITY) o += part_o[(row * splits + sp) * D + c] * exp2f(ml[sp * 2] - M);
    out[row * s.d + c] = __float2bfloat16_rn(o * inv);
  }
}

int padded_dim(int64_t d) { return d <= 64 ? 64 : (d <= 128 ? 128 : 256); }

}  // namespace

size_t attention_decode_workspace_bytes(const AttentionShape& s) {
  const int64_t rows = s.Tq * s.Hq * num_splits(s);
  return sizeof(float) * rows * (padded_dim(s.d) + 2);
}

void attention_decode(const AttentionShape& s, const bf16* q, const bf16* k, const bf16* v, const int64_t* q_pos,
                      const int64_t* k_pos, float scale, bf16* out, void* workspace, cudaStream_t stream,
                      const int32_t* keys_dev) {
  HYPIC_CUDA_REQUIRE(s.Hq > 0 && s.Hkv > 0 && s.Hq % s.Hkv == 0 && s.Hq <= 65535,
                     "attention_decode: Hq must be a positive multiple of Hkv");
  HYPIC_CUDA_REQUIRE(s.d > 0 && s.d <= kMaxD, "attention_decode: head dim must be <= 256");
  HYPIC_CUDA_REQUIRE(s.Tq >= 0 && s.Tq <= 65535 && s.Tk >= 0, "attention_decode: bad lengths");
  if (s.Tq == 0) return;
  const int64_t splits = num_splits(s);
  const int D = padded_dim(s.d);
  float* part_o = static_cast<float*>(workspace);
  float* part_ml = part_o + s.Tq * s.Hq * splits * D;
  const dim3 grid(unsigned(splits), unsigned(s.Hq), unsigned(s.Tq));
  const float sl2 = scale * 1.4426950408889634f;
  if (D == 64)
    decode_kernel<64><<<grid, kWarps * 32, 0, stream>>>(s, splits, q, k, v, q_pos, k_pos, keys_dev, sl2, part_o,
                                                               part_ml);
  else if (D == 128)
    decode_kernel<128><<<grid, kWarps * 32, 0, stream>>>(s, splits, q, k, v, q_pos, k_pos, keys_dev, sl2, part_o,
                                                               part_ml);
  else
    decode_kernel<256><<<grid, kWarps * 32, 0, stream>>>(s, splits, q, k, v, q_pos, k_pos, keys_dev, sl2, part_o,
                                                               part_ml);
  HYPIC_CUDA_LAUNCH_CHECK();
  combine_kernel<<<unsigned(s.Tq * s.Hq), 128, 0, stream>>>(s, splits, D, part_o, part_ml, out);
  HYPIC_CUDA_LAUNCH_CHECK();
}

}  // namespace hypic::cuda
