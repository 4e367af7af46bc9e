// Attention for few query rows (decode): the keys are split into ranges of 128 processed by separate
// blocks (flash-decoding), the 4 warps of a block take 4 keys at a time each with the head dim spread over
// the lanes (all 8 loads in flight before the first is used), and a combine pass merges the partial
// softmaxes. Memory-bound: K and V are read once per query head.
#include <climits>
#include <cstdlib>
#include <cstring>

#include "kernels/cuda/attention.h"
#include "kernels/cuda/attention_combine.cuh"
#include "kernels/cuda/check.h"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/env_switch.h"
#include "kernels/cuda/mma.cuh"
#include "kernels/cuda/pdl_launch.cuh"
#include "kernels/cuda/rope.h"

namespace hypic::cuda {
namespace {

constexpr int kWarps = 4;
// Each block walks its key range with 4 warps taking kGroup keys at a time (loads issued together), so a
// split of kKeysPerSplit keys is 8 rounds per warp: short enough that a decode step's few query rows
// still fill the GPU, long enough that the combine stays small.
constexpr int kGroup = 4;
constexpr int kKeysPerSplit = 128;
constexpr int kMaxSplits = 128;
static_assert(kMaxSplits <= detail::kCombineMaxSplits, "the combine pass holds every split's weight");
constexpr int kMaxD = 256;

// The grouped walk (below) takes a block per kv head instead of per query head, so its splits are
// shorter to keep as many blocks.
constexpr int kGqaKeysPerSplit = 64, kGqaGroup = 2;
constexpr int64_t kMinKeysPerSplit = 16;

bool gqa_shape(const AttentionShape& s) {
  const int64_t g = s.Hkv > 0 ? s.Hq / s.Hkv : 0;
  return (g == 2 || g == 4 || g == 8) && (s.d == 128 || s.d == 256);
}

// The wave of splits and, over slots, the first tile read before the wait; HYPIC_CUDA_DECODE_ATTN_WAVE=0:
// neither (A/B runs). Read at each call: the split count and the workspace size must agree, so it is set
// before a step is captured.
bool wave_form() { return !env_is("HYPIC_CUDA_DECODE_ATTN_WAVE", "0"); }

int64_t num_splits(const AttentionShape& s) {
  const bool gqa = gqa_shape(s);
  const int64_t keys = gqa ? kGqaKeysPerSplit : kKeysPerSplit;
  int64_t cap = kMaxSplits;
  if (gqa && wave_form()) {
    // A grid of few blocks (one row over 2 kv heads) takes as many splits as one wave of two blocks an SM
    // holds: 132 on an H200, so that a cache just past a power of two (8193-8448 keys under a bound of 16k)
    // gives each warp one tile of 16 keys, where 128 splits of 65 keys gave warp 0 a second round.
    const int64_t blocks = s.Hkv * (s.Tq > 0 ? s.Tq : 1), wave = 2 * int64_t(detail::device_sm_count()) / blocks;
    cap = wave < kMaxSplits ? kMaxSplits : (wave > detail::kCombineMaxSplits ? detail::kCombineMaxSplits : wave);
  }
  int64_t n = (s.Tk + keys - 1) / keys;
  return n < 1 ? 1 : (n > cap ? cap : n);
}

// The keys split sp of query row i walks: rows [begin, end) of its cache (the caller's, or sequence i's
// own through its slot). The launch is sized by s.Tk (a captured step's: the cache's capacity), but the
// keys present (the device-side count, a slot's rows) are what is dealt over the splits, so a cache that
// grew to twice its rows still keeps every split busy (dealing s.Tk left half of them empty and the
// other half twice as long).
struct SplitKeys {
  const bf16* k;
  const bf16* v;
  const int64_t* pos;
  int64_t begin, end;
};

__device__ __forceinline__ SplitKeys split_keys(const AttentionShape& s, int64_t splits, int64_t sp, int64_t i,
                                                const bf16* k, const bf16* v, const int64_t* k_pos,
                                                const int32_t* keys_dev, const KvSlot* slots) {
  int64_t Tk = keys_dev && int64_t(*keys_dev) < s.Tk ? int64_t(*keys_dev) : s.Tk;
  if (slots) {  // query row i is sequence i, over its own cache
    const KvSlot& sl = slots[i];
    k = sl.k;
    v = sl.v;
    k_pos = sl.pos;
    Tk = int64_t(sl.rows) < Tk ? int64_t(sl.rows) : Tk;
  }
  if (Tk < 0) Tk = 0;
  int64_t per = (Tk + splits - 1) / splits;
  per = per < kMinKeysPerSplit ? kMinKeysPerSplit : per;  // short caches: fewer, fuller splits
  const int64_t begin = sp * per < Tk ? sp * per : Tk;
  return {k, v, k_pos, begin, begin + per < Tk ? begin + per : Tk};
}

// A row of E bf16 kept as loaded (bf16 bits), to be converted when used: a warp holds the next round's rows
// this way while it works on the current one.
template <int E>
struct RawRow {
  uint32_t w[E / 2];
};
template <int E>
__device__ __forceinline__ RawRow<E> load_raw(const bf16* p) {
  RawRow<E> r;
  if constexpr (E == 8) {
    const uint4 u = *reinterpret_cast<const uint4*>(p);
    r.w[0] = u.x, r.w[1] = u.y, r.w[2] = u.z, r.w[3] = u.w;
  } else if constexpr (E == 4) {
    const uint2 u = *reinterpret_cast<const uint2*>(p);
    r.w[0] = u.x, r.w[1] = u.y;
  } else {
    r.w[0] = *reinterpret_cast<const uint32_t*>(p);
  }
  return r;
}
template <int E>
__device__ __forceinline__ void raw_to_float(const RawRow<E>& r, float (&out)[E]) {
#pragma unroll
  for (int j = 0; j < E / 2; ++j) {
    const float2 f = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&r.w[j]));
    out[2 * j] = f.x;
    out[2 * j + 1] = f.y;
  }
}

// E consecutive bf16 (E = 2, 4, 8: one 4/8/16-byte load) as floats.
template <int E>
__device__ __forceinline__ void load_row(const bf16* p, float (&out)[E]) {
  raw_to_float<E>(load_raw<E>(p), out);
}

// The vectorised walk for d == D and 16-byte aligned rows: each warp takes kGroup keys per round, issues
// all their K and V loads before using any, reduces the kGroup dot products together and folds them
// into its running softmax at once. Writes the warp's (m, l, acc) like the scalar walk.
template <int D>
__device__ __forceinline__ void walk_keys_vec(const AttentionShape& s, int64_t j_begin, int64_t j_end, int warp,
                                              int lane, int64_t kh, const bf16* k, const bf16* v,
                                              const int64_t* k_pos, int64_t qp, const float (&qr)[D / 32],
                                              float& m, float& l, float (&acc)[D / 32]) {
  constexpr int E = D / 32;
  for (int64_t j0 = j_begin + int64_t(warp) * kGroup; j0 < j_end; j0 += int64_t(kWarps) * kGroup) {
    float kf[kGroup][E], vf[kGroup][E], dot[kGroup];
    bool vis[kGroup];
#pragma unroll
    for (int g = 0; g < kGroup; ++g) {
      const int64_t j = j0 + g;
      vis[g] = j < j_end && k_pos[j < j_end ? j : j0] <= qp;
      const int64_t jj = j < j_end ? j : j0;  // a valid row (its result is dropped)
      load_row<E>(k + (jj * s.Hkv + kh) * D + lane * E, kf[g]);
      load_row<E>(v + (jj * s.Hkv + kh) * D + lane * E, vf[g]);
    }
#pragma unroll
    for (int g = 0; g < kGroup; ++g) {
      float d = 0.0f;
#pragma unroll
      for (int e = 0; e < E; ++e) d = fmaf(qr[e], kf[g][e], d);
      dot[g] = d;
    }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1)
#pragma unroll
      for (int g = 0; g < kGroup; ++g) dot[g] += __shfl_xor_sync(0xffffffffu, dot[g], off);
    float mx = m;
#pragma unroll
    for (int g = 0; g < kGroup; ++g)
      if (vis[g]) mx = fmaxf(mx, dot[g]);
    if (mx == -INFINITY) continue;  // nothing visible yet
    const float alpha = exp2f(m - mx);
    l *= alpha;
#pragma unroll
    for (int e = 0; e < E; ++e) acc[e] *= alpha;
#pragma unroll
    for (int g = 0; g < kGroup; ++g) {
      const float p = vis[g] ? exp2f(dot[g] - mx) : 0.0f;
      l += p;
#pragma unroll
      for (int e = 0; e < E; ++e) acc[e] = fmaf(p, vf[g][e], acc[e]);
    }
    m = mx;
  }
}

template <int D, bool kVec>
__global__ void __launch_bounds__(kWarps * 32)
    decode_kernel(AttentionShape s, int64_t splits, const bf16* __restrict__ q, const bf16* k_in, const bf16* v_in,
                  const int64_t* __restrict__ q_pos, const int64_t* k_pos_in, const int32_t* __restrict__ keys_dev,
                  const KvSlot* __restrict__ slots, float scale_log2, float* __restrict__ part_o,
                  float* __restrict__ part_ml, bool early) {
  detail::pdl_wait();  // programmatic launch in a decode step: the query and cache rows are the kernels before's
  if (early) detail::pdl_trigger();
  constexpr int E = D / 32;  // head-dim elements per lane
  __shared__ float wm[kWarps], wl[kWarps], wo[kWarps][D];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t sp = blockIdx.x, h = blockIdx.y, i = blockIdx.z, kh = h / (s.Hq / s.Hkv);
  const int d = int(s.d);
  const SplitKeys r = split_keys(s, splits, sp, i, k_in, v_in, k_pos_in, keys_dev, slots);
  const bf16 *k = r.k, *v = r.v;
  const int64_t* k_pos = r.pos;
  const int64_t j_begin = r.begin, j_end = r.end;
  const int64_t qp = q_pos[i];
  float qr[E], acc[E];
#pragma unroll
  for (int e = 0; e < E; ++e) {
    const int c = lane * E + e;
    qr[e] = c < d ? __bfloat162float(q[(i * s.Hq + h) * d + c]) * scale_log2 : 0.0f;
    acc[e] = 0.0f;
  }
  float m = -INFINITY, l = 0.0f;
  if constexpr (kVec) {
    walk_keys_vec<D>(s, j_begin, j_end, warp, lane, kh, k, v, k_pos, qp, qr, m, l, acc);
  } else {
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

// A block's partial softmax for its split (the G heads of kv head kh, query row i) from its warps' (m, l,
// sums): the warps' sums rescaled to the block's max and added, written as the combine pass reads them.
template <int D, int G>
__device__ __forceinline__ void store_split(const AttentionShape& s, int64_t splits, int64_t sp, int64_t kh, int64_t i,
                                            const float (&wm)[kWarps][G], const float (&wl)[kWarps][G],
                                            const float (&wo)[kWarps][G][D], float* __restrict__ part_o,
                                            float* __restrict__ part_ml) {
  for (int g = 0; g < G; ++g) {
    float M = -INFINITY;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) M = fmaxf(M, wm[w][g]);
    const int64_t base = (i * s.Hq + kh * G + g) * splits + sp;
    for (int c = threadIdx.x; c < D; c += blockDim.x) {
      float o = 0.0f;
#pragma unroll
      for (int w = 0; w < kWarps; ++w)
        if (wm[w][g] != -INFINITY) o += wo[w][g][c] * exp2f(wm[w][g] - M);
      part_o[base * D + c] = o;
    }
    if (threadIdx.x == 0) {
      float L = 0.0f;
      for (int w = 0; w < kWarps; ++w)
        if (wm[w][g] != -INFINITY) L += wl[w][g] * exp2f(wm[w][g] - M);
      part_ml[base * 2] = M;
      part_ml[base * 2 + 1] = L;
    }
  }
}

// Grouped-query decode: one block per (split, kv head, query row) computes all G query heads that share
// the kv head, so each key and value row is loaded once for the group instead of once per query head
// (the per-head kernel read the cache G times over, from L2 at best). Each warp walks kGqaGroup keys per
// round with all their loads issued first, holding G heads' queries, sums and softmax state.
template <int D, int G>
__global__ void __launch_bounds__(kWarps * 32)
    decode_gqa_kernel(AttentionShape s, int64_t splits, const bf16* __restrict__ q, const bf16* k_in, const bf16* v_in,
                      const int64_t* __restrict__ q_pos, const int64_t* k_pos_in, const int32_t* __restrict__ keys_dev,
                      const KvSlot* __restrict__ slots, float scale_log2, float* __restrict__ part_o,
                      float* __restrict__ part_ml, bool early) {
  detail::pdl_wait();  // programmatic launch in a decode step: the query and cache rows are the kernels before's
  if (early) detail::pdl_trigger();
  constexpr int E = D / 32, KG = kGqaGroup;
  __shared__ float wm[kWarps][G], wl[kWarps][G];
  __shared__ float wo[kWarps][G][D];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t sp = blockIdx.x, kh = blockIdx.y, i = blockIdx.z;
  const SplitKeys r = split_keys(s, splits, sp, i, k_in, v_in, k_pos_in, keys_dev, slots);
  const bf16 *k = r.k, *v = r.v;
  const int64_t* k_pos = r.pos;
  const int64_t j_begin = r.begin, j_end = r.end;
  const int64_t qp = q_pos[i];
  float qr[G][E], acc[G][E], m[G], l[G];
#pragma unroll
  for (int g = 0; g < G; ++g) {
    float qf[E];
    load_row<E>(q + (i * s.Hq + kh * G + g) * D + lane * E, qf);
#pragma unroll
    for (int e = 0; e < E; ++e) {
      qr[g][e] = qf[e] * scale_log2;
      acc[g][e] = 0.0f;
    }
    m[g] = -INFINITY;
    l[g] = 0.0f;
  }
  // The next round's K and V rows and positions are loaded (raw) before this round's arithmetic, so a
  // warp always has two rounds of loads in flight: with G heads' queries and sums in registers it can
  // hold only a few keys per round, and one round's loads alone left each split latency-bound.
  RawRow<E> kr[KG], vr[KG];
  int64_t kp[KG];
  const auto fetch = [&](int64_t j0) {
#pragma unroll
    for (int kk = 0; kk < KG; ++kk) {
      const int64_t j = j0 + kk;
      const int64_t jj = j < j_end ? j : j0;  // a valid row (its result is dropped)
      kp[kk] = k_pos[jj];
      kr[kk] = load_raw<E>(k + (jj * s.Hkv + kh) * D + lane * E);
      vr[kk] = load_raw<E>(v + (jj * s.Hkv + kh) * D + lane * E);
    }
  };
  if (j_begin + int64_t(warp) * KG < j_end) fetch(j_begin + int64_t(warp) * KG);
  for (int64_t j0 = j_begin + int64_t(warp) * KG; j0 < j_end; j0 += int64_t(kWarps) * KG) {
    float kf[KG][E], vf[KG][E];
    bool vis[KG];
#pragma unroll
    for (int kk = 0; kk < KG; ++kk) {
      vis[kk] = j0 + kk < j_end && kp[kk] <= qp;
      raw_to_float<E>(kr[kk], kf[kk]);
      raw_to_float<E>(vr[kk], vf[kk]);
    }
    if (j0 + int64_t(kWarps) * KG < j_end) fetch(j0 + int64_t(kWarps) * KG);
    float dot[G][KG];
#pragma unroll
    for (int g = 0; g < G; ++g)
#pragma unroll
      for (int kk = 0; kk < KG; ++kk) {
        float d = 0.0f;
#pragma unroll
        for (int e = 0; e < E; ++e) d = fmaf(qr[g][e], kf[kk][e], d);
        dot[g][kk] = d;
      }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1)
#pragma unroll
      for (int g = 0; g < G; ++g)
#pragma unroll
        for (int kk = 0; kk < KG; ++kk) dot[g][kk] += __shfl_xor_sync(0xffffffffu, dot[g][kk], off);
#pragma unroll
    for (int g = 0; g < G; ++g) {
      float mx = m[g];
#pragma unroll
      for (int kk = 0; kk < KG; ++kk)
        if (vis[kk]) mx = fmaxf(mx, dot[g][kk]);
      if (mx == -INFINITY) continue;  // nothing visible yet
      const float alpha = exp2f(m[g] - mx);
      l[g] *= alpha;
#pragma unroll
      for (int e = 0; e < E; ++e) acc[g][e] *= alpha;
#pragma unroll
      for (int kk = 0; kk < KG; ++kk) {
        const float p = vis[kk] ? exp2f(dot[g][kk] - mx) : 0.0f;
        l[g] += p;
#pragma unroll
        for (int e = 0; e < E; ++e) acc[g][e] = fmaf(p, vf[kk][e], acc[g][e]);
      }
      m[g] = mx;
    }
  }
#pragma unroll
  for (int g = 0; g < G; ++g) {
    if (lane == 0) {
      wm[warp][g] = m[g];
      wl[warp][g] = l[g];
    }
#pragma unroll
    for (int e = 0; e < E; ++e) wo[warp][g][lane * E + e] = acc[g][e];
  }
  __syncthreads();
  store_split<D, G>(s, splits, sp, kh, i, wm, wl, wo, part_o, part_ml);
}

// Tensor-core form of the grouped walk for G == 8 query heads a kv head (the mma's n). A warp takes 16
// keys at a time: S^T [16 keys x 8 heads] = K Q^T by m16n8k16 products over the head dim, the K rows read
// from global memory straight into A fragments. The head dim is permuted within each 32 (lane t of a row
// holds dims 8t..8t+7, which feed two k-steps: 0..3 the first, 4..7 the second) and the queries are laid
// out as B fragments in the same order, so one 16-byte load feeds two products and no shuffle sums a dot
// product. The softmax runs on the C fragments (a row's max and sum over 8 lanes), and the weighted sum
// of values on the CUDA cores: each lane E dims of all 8 heads, the tile's probabilities and rescales
// passed through shared memory. (The CUDA-core walk above spent five shuffles a head and key.)
//
// kFold (a batched step given its new rows unnormed, DecodeNewRows): the block norms and rotates its 8 query
// heads itself, and the block whose split holds a sequence's new row norms and rotates that key and appends
// it with its value and position, as qk_norm_rope with the append does, bit for bit; so that kernel, and its
// hop between the products and this walk, is not launched.
constexpr int kFoldMaxHalf = 32;
struct FoldArgs {
  const bf16* q_src;  // [N, Hq, q_stride]
  int64_t q_stride;
  const bf16* k;  // [N, Hkv, D]
  const bf16* v;  // [N, Hkv, D]
  const float* q_norm;
  const float* k_norm;
  float eps;
  int zc, half;
  float inv_freq[kFoldMaxHalf];
};

// One head's row of D (lane i holds elements lane + 32 m), normed with the weights w (lane's, 1 + w where
// zero-centred) and rotated by (sn, cs) (the lane's pair, lane < half), into dst as bf16: qk_norm_rope's math.
template <int D>
__device__ __forceinline__ void norm_rotate_row(const bf16* src, const float (&w)[D / 32], float eps, int half,
                                                float sn, float cs, float* b, bf16* dst, int lane) {
  constexpr int E = D / 32;
  float v[E], ss = 0.0f;
#pragma unroll
  for (int m = 0; m < E; ++m) {
    v[m] = __bfloat162float(src[lane + 32 * m]);
    ss += v[m] * v[m];
  }
  const float inv = rsqrtf(detail::warp_sum(ss) / D + eps);
#pragma unroll
  for (int m = 0; m < E; ++m) b[lane + 32 * m] = detail::round_bf16(v[m] * inv * w[m]);
  __syncwarp();
  if (lane < half) {
    const float a = b[lane], c = b[lane + half];
    dst[lane] = __float2bfloat16_rn(a * cs - c * sn);
    dst[lane + half] = __float2bfloat16_rn(c * cs + a * sn);
  }
  for (int i = 2 * half + lane; i < D; i += 32) dst[i] = __float2bfloat16_rn(b[i]);
  __syncwarp();
}

template <int D, bool kFold = false>
__global__ void __launch_bounds__(kWarps * 32, 2)
    decode_gqa_mma_kernel(AttentionShape s, int64_t splits, const bf16* __restrict__ q, const bf16* k_in,
                          const bf16* v_in, const int64_t* __restrict__ q_pos, const int64_t* k_pos_in,
                          const int32_t* __restrict__ keys_dev, const KvSlot* __restrict__ slots, float scale_log2,
                          float* __restrict__ part_o, float* __restrict__ part_ml, bool early, bool tile_first,
                          FoldArgs fa) {
  // Over slots (a batched step), the kernels that may still run (the norm/rotation or the append, and the
  // products before it) write no cache row but the new one, slots[i].rows - 1: the warp's first tile of the
  // older rows is read before the wait.
  const bool early_tile = tile_first && slots != nullptr;
  if (!early_tile) {
    detail::pdl_wait();  // programmatic launch in a decode step: the query and cache rows are the kernels before's
    if (early) detail::pdl_trigger();
  }
  constexpr int G = 8, E = D / 32, S32 = D / 32, KT = 16;
  __shared__ float wm[kWarps][G], wl[kWarps][G];
  __shared__ float wo[kWarps][G][D];
  __shared__ __align__(16) float ps[kWarps][KT + 1][G];  // the tile's probabilities [key][head], then the rescales
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int64_t sp = blockIdx.x, kh = blockIdx.y, i = blockIdx.z;
  const SplitKeys r = split_keys(s, splits, sp, i, k_in, v_in, k_pos_in, keys_dev, slots);
  const bf16 *k = r.k, *v = r.v;
  const int64_t* k_pos = r.pos;
  const int64_t j_begin = r.begin, j_end = r.end;
  const int64_t ld = s.Hkv * D;
  // A tile: rows ja (key g) and jb (key g + 8) of K as A fragments, the 16 value rows, the two positions.
  uint4 ka[S32], kb[S32];
  RawRow<E> vr[KT];
  int64_t pa = 0, pb = 0;
  const auto load_tile = [&](int64_t jt) {
    const int64_t ja = jt + g < j_end ? jt + g : jt, jb = jt + g + 8 < j_end ? jt + g + 8 : jt;
#pragma unroll
    for (int c = 0; c < S32; ++c) {
      ka[c] = *reinterpret_cast<const uint4*>(k + ja * ld + kh * D + c * 32 + 8 * t);
      kb[c] = *reinterpret_cast<const uint4*>(k + jb * ld + kh * D + c * 32 + 8 * t);
    }
#pragma unroll
    for (int kk = 0; kk < KT; ++kk) {
      const int64_t j = jt + kk < j_end ? jt + kk : jt;
      vr[kk] = load_raw<E>(v + j * ld + kh * D + lane * E);
    }
    pa = k_pos[ja];
    pb = k_pos[jb];
  };
  int64_t j0 = j_begin + int64_t(warp) * KT;
  // kFold: the norm weights and the rotation's angles before the wait (the positions are the step's inputs).
  float wq[kFold ? E : 1], wk[kFold ? E : 1], fsn = 0.0f, fcs = 0.0f;
  if constexpr (kFold) {
#pragma unroll
    for (int m = 0; m < E; ++m) {
      const float a = fa.q_norm[lane + 32 * m];
      const float b = warp == kWarps - 1 ? fa.k_norm[lane + 32 * m] : 0.0f;  // the warp that may append the key
      wq[m] = fa.zc ? 1.0f + a : a;
      wk[m] = fa.zc ? 1.0f + b : b;
    }
    if (lane < fa.half) sincosf(static_cast<float>(q_pos[i]) * fa.inv_freq[lane], &fsn, &fcs);
  }
  if (early_tile) {
    if (j0 < j_end) load_tile(j0);
    detail::pdl_wait();  // the query and the new row
    if (early) detail::pdl_trigger();
  }
  // kFold: the queries into shared memory (wo's space, unused until the end), and the new row into the cache.
  bf16* qsm = reinterpret_cast<bf16*>(&wo[0][0][0] + G * D);
  if constexpr (kFold) {
    float* scratch = &wo[0][0][0] + warp * D;
#pragma unroll
    for (int hh = 0; hh < G / kWarps; ++hh) {
      const int h = warp * (G / kWarps) + hh;
      norm_rotate_row<D>(fa.q_src + (i * s.Hq + kh * G + h) * fa.q_stride, wq, fa.eps, fa.half, fsn, fcs, scratch,
                         qsm + h * D, lane);
    }
    const KvSlot& sl = slots[i];
    const int64_t fresh = int64_t(sl.rows) - 1;
    // The block whose keys hold it (the last split's where the row is past the launch's bound: read by none).
    const bool mine = (fresh >= j_begin && fresh < j_end) || (sp == splits - 1 && fresh >= j_end);
    if (warp == kWarps - 1 && mine && fresh < sl.capacity) {
      const int64_t at = (fresh * s.Hkv + kh) * D, from = (i * s.Hkv + kh) * D;
      norm_rotate_row<D>(fa.k + from, wk, fa.eps, fa.half, fsn, fcs, scratch, sl.k + at, lane);
      for (int e = lane; e < D; e += 32) sl.v[at + e] = fa.v[from + e];
      if (kh == 0 && lane == 0) sl.pos[fresh] = q_pos[i];
    }
    __syncthreads();  // the queries and the new row written
  }
  if (early_tile) {
    // The tile again where it holds the new row, now that the row is written (one warp a row and kv head).
    const int64_t fresh = int64_t(slots[i].rows) - 1;
    if (j0 < j_end && fresh >= j0 && fresh < j0 + KT) load_tile(j0);
  }
  const int64_t qp = q_pos[i];
  uint32_t qb[2 * S32][2];
#pragma unroll
  for (int c = 0; c < S32; ++c) {
    const bf16* qrow = kFold ? qsm + g * D : q + (i * s.Hq + kh * G + g) * D;
    const uint4 u = *reinterpret_cast<const uint4*>(qrow + c * 32 + 8 * t);
    qb[2 * c][0] = u.x, qb[2 * c][1] = u.y, qb[2 * c + 1][0] = u.z, qb[2 * c + 1][1] = u.w;
  }
  if constexpr (kFold) __syncthreads();  // every warp has its queries before any writes wo
  float acc[G][E];
#pragma unroll
  for (int h = 0; h < G; ++h)
#pragma unroll
    for (int e = 0; e < E; ++e) acc[h][e] = 0.0f;
  float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f;  // heads 2t and 2t + 1 (l: this lane's keys)
  // One tile of the warp's: the scores, the online softmax, the weighted values.
  const auto process = [&](int64_t jt) {
    const bool va = jt + g < j_end && pa <= qp, vb = jt + g + 8 < j_end && pb <= qp;
    float sc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
    for (int c = 0; c < S32; ++c) {
      const uint32_t a0[4] = {ka[c].x, kb[c].x, ka[c].y, kb[c].y}, a1[4] = {ka[c].z, kb[c].z, ka[c].w, kb[c].w};
      detail::mma_bf16_16816(sc, a0, qb[2 * c]);
      detail::mma_bf16_16816(sc, a1, qb[2 * c + 1]);
    }
    // sc: (key g, head 2t), (key g, head 2t+1), (key g+8, head 2t), (key g+8, head 2t+1)
    const float s0 = va ? sc[0] * scale_log2 : -INFINITY, s1 = va ? sc[1] * scale_log2 : -INFINITY;
    const float s2 = vb ? sc[2] * scale_log2 : -INFINITY, s3 = vb ? sc[3] * scale_log2 : -INFINITY;
    float mx0 = fmaxf(s0, s2), mx1 = fmaxf(s1, s3);
#pragma unroll
    for (int off = 4; off < 32; off <<= 1) {
      mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, off));
      mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, off));
    }
    const float n0 = fmaxf(m0, mx0), n1 = fmaxf(m1, mx1);
    const float al0 = n0 == -INFINITY ? 1.0f : exp2f(m0 - n0), al1 = n1 == -INFINITY ? 1.0f : exp2f(m1 - n1);
    const float p0 = n0 == -INFINITY ? 0.0f : exp2f(s0 - n0), p2 = n0 == -INFINITY ? 0.0f : exp2f(s2 - n0);
    const float p1 = n1 == -INFINITY ? 0.0f : exp2f(s1 - n1), p3 = n1 == -INFINITY ? 0.0f : exp2f(s3 - n1);
    l0 = l0 * al0 + p0 + p2;
    l1 = l1 * al1 + p1 + p3;
    m0 = n0;
    m1 = n1;
    __syncwarp();  // the previous tile's reads of ps are done
    *reinterpret_cast<float2*>(&ps[warp][g][2 * t]) = make_float2(p0, p1);
    *reinterpret_cast<float2*>(&ps[warp][g + 8][2 * t]) = make_float2(p2, p3);
    if (g == 0) *reinterpret_cast<float2*>(&ps[warp][KT][2 * t]) = make_float2(al0, al1);
    __syncwarp();
    {
      const float4 a = *reinterpret_cast<const float4*>(&ps[warp][KT][0]);
      const float4 b = *reinterpret_cast<const float4*>(&ps[warp][KT][4]);
      const float al[G] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
#pragma unroll
      for (int h = 0; h < G; ++h)
#pragma unroll
        for (int e = 0; e < E; ++e) acc[h][e] *= al[h];
    }
#pragma unroll
    for (int kk = 0; kk < KT; ++kk) {
      const float4 a = *reinterpret_cast<const float4*>(&ps[warp][kk][0]);
      const float4 b = *reinterpret_cast<const float4*>(&ps[warp][kk][4]);
      const float p[G] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
      float vf[E];
      raw_to_float<E>(vr[kk], vf);
#pragma unroll
      for (int h = 0; h < G; ++h)
#pragma unroll
        for (int e = 0; e < E; ++e) acc[h][e] = fmaf(p[h], vf[e], acc[h][e]);
    }
  };
  const int64_t step = int64_t(kWarps) * KT;
  if (early_tile && j0 < j_end) {  // the tile read before the wait
    process(j0);
    j0 += step;
  }
  for (; j0 < j_end; j0 += step) {
    load_tile(j0);
    process(j0);
  }
#pragma unroll
  for (int off = 4; off < 32; off <<= 1) {
    l0 += __shfl_xor_sync(0xffffffffu, l0, off);
    l1 += __shfl_xor_sync(0xffffffffu, l1, off);
  }
  if (g == 0) {
    wm[warp][2 * t] = m0, wm[warp][2 * t + 1] = m1;
    wl[warp][2 * t] = l0, wl[warp][2 * t + 1] = l1;
  }
#pragma unroll
  for (int h = 0; h < G; ++h)
#pragma unroll
    for (int e = 0; e < E; ++e) wo[warp][h][lane * E + e] = acc[h][e];
  __syncthreads();
  store_split<D, G>(s, splits, sp, kh, i, wm, wl, wo, part_o, part_ml);
}

int padded_dim(int64_t d) { return d <= 64 ? 64 : (d <= 128 ? 128 : 256); }

}  // namespace

size_t attention_decode_workspace_bytes(const AttentionShape& s) {
  const int64_t rows = s.Tq * s.Hq * num_splits(s);
  return sizeof(float) * rows * (padded_dim(s.d) + 2);
}

namespace {
bool mma_walk() { return !env_is("HYPIC_CUDA_DECODE_ATTN_MMA", "0"); }

void launch_decode(const AttentionShape& s, const bf16* q, const bf16* k, const bf16* v, const int64_t* q_pos,
                   const int64_t* k_pos, const KvSlot* slots, float scale, bf16* out, void* workspace,
                   cudaStream_t stream, const int32_t* keys_dev, const DecodeNewRows* nr = nullptr) {
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
  const bool pdl = detail::pdl_chain_enabled();
  // The vectorised walk needs whole 16-byte rows: d equal to its padded size and aligned caches (slots'
  // caches are whole device allocations).
  const bool vec = s.d == D && (slots || ((reinterpret_cast<uintptr_t>(k) | reinterpret_cast<uintptr_t>(v)) & 15) == 0);
  if (vec && gqa_shape(s)) {
    const dim3 ggrid(unsigned(splits), unsigned(s.Hkv), unsigned(s.Tq));
    const int64_t G = s.Hq / s.Hkv;
    // HYPIC_CUDA_DECODE_ATTN_MMA=0: the CUDA-core walk for every group size (A/B runs).
    static const bool mma = mma_walk();
    const bool early = detail::pdl_trigger_early(int64_t(ggrid.x) * ggrid.y * ggrid.z);
#define HYPIC_GQA_LAUNCH(...)                                                                                 \
  detail::launch_pdl(pdl, __VA_ARGS__, ggrid, dim3(kWarps * 32), 0, stream, s, splits, q, k, v, q_pos, k_pos, \
                     keys_dev, slots, sl2, part_o, part_ml, early)
    if (G == 8 && mma) {
      const bool tile_first = wave_form();
      FoldArgs fa{};
      if (nr) {
        fa = {nr->q_src, nr->q_stride, nr->k, nr->v, nr->q_norm, nr->k_norm, nr->eps, nr->zero_centred ? 1 : 0,
              int(nr->rot_dim / 2), {}};
        rope_inv_freq(nr->rot_dim, nr->theta, fa.inv_freq);
      }
      auto* kernel = nr ? (D == 256 ? decode_gqa_mma_kernel<256, true> : decode_gqa_mma_kernel<128, true>)
                        : (D == 256 ? decode_gqa_mma_kernel<256, false> : decode_gqa_mma_kernel<128, false>);
      detail::launch_pdl(pdl, kernel, ggrid, dim3(kWarps * 32), 0, stream, s, splits, q, k, v, q_pos, k_pos, keys_dev,
                         slots, sl2, part_o, part_ml, early, tile_first, fa);
    } else if (D == 256) {
      if (G == 8) HYPIC_GQA_LAUNCH(decode_gqa_kernel<256, 8>);
      else if (G == 4) HYPIC_GQA_LAUNCH(decode_gqa_kernel<256, 4>);
      else HYPIC_GQA_LAUNCH(decode_gqa_kernel<256, 2>);
    } else {
      if (G == 8) HYPIC_GQA_LAUNCH(decode_gqa_kernel<128, 8>);
      else if (G == 4) HYPIC_GQA_LAUNCH(decode_gqa_kernel<128, 4>);
      else HYPIC_GQA_LAUNCH(decode_gqa_kernel<128, 2>);
    }
#undef HYPIC_GQA_LAUNCH
  } else {
    const bool early = detail::pdl_trigger_early(int64_t(grid.x) * grid.y * grid.z);
#define HYPIC_DECODE_LAUNCH(DIM, VEC)                                                                             \
  detail::launch_pdl(pdl, decode_kernel<DIM, VEC>, grid, dim3(kWarps * 32), 0, stream, s, splits, q, k, v, q_pos, \
                     k_pos, keys_dev, slots, sl2, part_o, part_ml, early)
    if (D == 64) {
      if (vec) HYPIC_DECODE_LAUNCH(64, true);
      else HYPIC_DECODE_LAUNCH(64, false);
    } else if (D == 128) {
      if (vec) HYPIC_DECODE_LAUNCH(128, true);
      else HYPIC_DECODE_LAUNCH(128, false);
    } else {
      if (vec) HYPIC_DECODE_LAUNCH(256, true);
      else HYPIC_DECODE_LAUNCH(256, false);
    }
#undef HYPIC_DECODE_LAUNCH
  }
  HYPIC_CUDA_LAUNCH_CHECK();
  detail::split_combine(splits, s.Tq * s.Hq, s.d, D, part_o, part_ml, out, stream, pdl);
  HYPIC_CUDA_LAUNCH_CHECK();
}
}  // namespace

void attention_decode(const AttentionShape& s, const bf16* q, const bf16* k, const bf16* v, const int64_t* q_pos,
                      const int64_t* k_pos, float scale, bf16* out, void* workspace, cudaStream_t stream,
                      const int32_t* keys_dev) {
  launch_decode(s, q, k, v, q_pos, k_pos, nullptr, scale, out, workspace, stream, keys_dev);
}

void attention_decode_batched(const AttentionShape& s, const bf16* q, const KvSlot* slots, const int64_t* q_pos,
                              float scale, bf16* out, void* workspace, cudaStream_t stream) {
  launch_decode(s, q, nullptr, nullptr, q_pos, nullptr, slots, scale, out, workspace, stream, nullptr);
}

bool attention_decode_folds(int64_t Hq, int64_t Hkv, int64_t d, int64_t rot_dim) {
  return env_is("HYPIC_CUDA_DECODE_ATTN_FOLD", "1") && Hkv > 0 && Hq == 8 * Hkv && (d == 128 || d == 256) &&
         rot_dim > 0 && rot_dim % 2 == 0 && rot_dim <= d && rot_dim / 2 <= kFoldMaxHalf && mma_walk();
}

void attention_decode_batched(const AttentionShape& s, const DecodeNewRows& rows, const KvSlot* slots,
                              const int64_t* q_pos, float scale, bf16* out, void* workspace, cudaStream_t stream) {
  HYPIC_CUDA_REQUIRE(attention_decode_folds(s.Hq, s.Hkv, s.d, rows.rot_dim),
                     "attention_decode_batched: the new rows' norm and rotation fold only where "
                     "attention_decode_folds says so");
  HYPIC_CUDA_REQUIRE(rows.q_src && rows.k && rows.v && rows.q_norm && rows.k_norm && rows.q_stride >= s.d,
                     "attention_decode_batched: missing new-row pointer");
  launch_decode(s, nullptr, nullptr, nullptr, q_pos, nullptr, slots, scale, out, workspace, stream, nullptr, &rows);
}

}  // namespace hypic::cuda
