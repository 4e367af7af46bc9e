// Flash-style attention prefill (FA2-like schedule on mma.sync).
//
// Block = 8 warps = 128 query rows of one query head; warp w owns rows 16w..16w+15 and keeps its O
// accumulator (16 x D fp32) in registers. Key tiles of 64 rows stream through two shared-memory
// buffers with cp.async: K and V of tile i+1 load while tile i is computed, one barrier per tile.
// Fragments come from ldmatrix (Q, K as stored; V transposed); P goes
// from the S accumulators straight into A fragments. Softmax runs in base 2 with the scale folded in.
//
// Positions are arbitrary, so the block first scans k_pos per tile (min / max, a chunk of tiles at a
// time) and keeps only the tiles some of its queries can see. Per warp a kept tile is then hidden
// (skipped), fully visible (no mask) or mixed (per-element int64 mask); with causal prefill only the
// tiles on the diagonal are mixed. Blocks run latest query tiles first (they carry the most keys),
// and the query heads sharing a kv head are adjacent in the launch order (K/V reuse in L2).
//
// Split form (attention_prefill_split): the key tiles of each (query tile, head) are cut into `splits`
// consecutive ranges, one block each, adjacent in the launch order; a block writes its rows'
// unnormalised output and (max, sum) instead of the normalised rows, and the combine pass of
// attention_combine.cuh merges them. For few query rows over many keys (the stitch) the plain form has
// too few blocks to fill the GPU.
#include <climits>

#include "kernels/cuda/attention.h"
#include "kernels/cuda/attention_combine.cuh"
#include "kernels/cuda/attention_prefill_sm90.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/mma.cuh"
#include "kernels/cuda/smem_limit.h"

namespace hypic::cuda {
namespace {

using detail::cp_async_16;
using detail::mma_bf16_16816;

constexpr int kWarps = 8, kThreads = 32 * kWarps, kBM = 16 * kWarps, kBN = 64;
constexpr int kChunk = 512;  // key tiles classified per scan (bounds the scan's shared memory)

template <int D>
struct Smem {
  static constexpr int kLd = D + 8;  // +16 bytes per row: ldmatrix and cp.async rows hit distinct banks
  static constexpr size_t tile = 2 * size_t(kBN) * kLd;  // one K or V tile
  static constexpr size_t q = 0;
  static constexpr size_t kv = q + 2 * size_t(kBM) * kLd;  // K0, V0, K1, V1: two tiles in flight
  static constexpr size_t kmin = kv + 4 * tile;
  static constexpr size_t kmax = kmin + sizeof(int64_t) * kChunk;
  static constexpr size_t list = kmax + sizeof(int64_t) * kChunk;
  static constexpr size_t keep = list + sizeof(uint16_t) * kChunk;
  static constexpr size_t bytes = keep + kChunk;
};

using detail::ex2;
using detail::warp_max_i64;
using detail::warp_min_i64;

// rows x D tile (row stride ld_src elements) -> shared (row stride ld_dst), asynchronously; rows at or
// beyond `valid` and columns at or beyond d are zero-filled. All threads of the block take part.
template <int D, int ROWS>
__device__ __forceinline__ void load_tile_async(bf16* dst, int ld_dst, const bf16* src, int64_t ld_src, int valid,
                                                int d) {
  constexpr int kCv = D / 8;
  static_assert(ROWS * kCv % kThreads == 0, "whole 16-byte pieces per thread");
#pragma unroll
  for (int it = 0; it < ROWS * kCv / kThreads; ++it) {
    const int i = int(threadIdx.x) + it * kThreads, r = i / kCv, c = (i % kCv) * 8;
    const bool ok = r < valid && c < d;
    cp_async_16(dst + r * ld_dst + c, ok ? src + r * ld_src + c : src, ok ? 16 : 0);
  }
}

// SPLIT: the split form (a key range per block, partials out); the plain form is compiled without it.
template <int D, bool SPLIT>
__global__ void __launch_bounds__(kThreads, D <= 64 ? 2 : 1)
    attention_prefill_kernel(AttentionShape s, const bf16* __restrict__ q, const bf16* __restrict__ k,
                             const bf16* __restrict__ v, const int64_t* __restrict__ q_pos,
                             const int64_t* __restrict__ k_pos, float scale_log2, bf16* __restrict__ out,
                             int64_t splits_arg, float* __restrict__ part_o, float* __restrict__ part_ml) {
  const int64_t splits = SPLIT ? splits_arg : 1;
  using SM = Smem<D>;
  constexpr int kLd = SM::kLd;
  constexpr int kNt = D / 8;  // n8 tiles of the output
  extern __shared__ __align__(128) unsigned char smem[];
  bf16* Qs = reinterpret_cast<bf16*>(smem + SM::q);
  int64_t* Kmin = reinterpret_cast<int64_t*>(smem + SM::kmin);
  int64_t* Kmax = reinterpret_cast<int64_t*>(smem + SM::kmax);
  uint16_t* List = reinterpret_cast<uint16_t*>(smem + SM::list);
  uint8_t* Keep = smem + SM::keep;
  __shared__ int64_t warp_qmin[kWarps], warp_qmax[kWarps];
  __shared__ int list_len;

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, t = lane & 3;
  // Launch order: latest query tile first; the heads of one kv head side by side.
  const int64_t n_mt = (s.Tq + kBM - 1) / kBM;
  const int64_t split = int64_t(blockIdx.x) % splits, bid = int64_t(blockIdx.x) / splits;
  const int64_t h = bid % s.Hq, kh = h / (s.Hq / s.Hkv);
  const int64_t m0 = (n_mt - 1 - bid / s.Hq) * kBM;
  const int d = int(s.d);
  const int rows = int(s.Tq - m0 < kBM ? s.Tq - m0 : kBM);
  const int64_t q_ld = s.Hq * d, kv_ld = s.Hkv * d;

  load_tile_async<D, kBM>(Qs, kLd, q + (m0 * s.Hq + h) * d, q_ld, rows, d);
  detail::cp_async_commit();

  // The warp's range of positions (valid rows only), kept in shared memory (registers are scarce).
  const int r_lo = warp * 16 + g, r_hi = r_lo + 8;
  {
    const bool ok = lane < 16 && warp * 16 + lane < rows;
    const int64_t p = ok ? q_pos[m0 + warp * 16 + lane] : 0;
    const int64_t mn = warp_min_i64(ok ? p : LLONG_MAX), mx = warp_max_i64(ok ? p : LLONG_MIN);
    if (lane == 0) {
      warp_qmin[warp] = mn;
      warp_qmax[warp] = mx;
    }
  }
  __syncthreads();
  int64_t bq_max = LLONG_MIN;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) bq_max = warp_qmax[w] > bq_max ? warp_qmax[w] : bq_max;

  float o[kNt][4];
#pragma unroll
  for (int i = 0; i < kNt; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
  float m_lo = -INFINITY, m_hi = -INFINITY, l_lo = 0.0f, l_hi = 0.0f;

  // This block's key tiles: [t_lo, t_hi) (all of them unless split).
  const int64_t n_tiles = (s.Tk + kBN - 1) / kBN;
  int64_t t_lo = 0, t_hi = n_tiles;
  if constexpr (SPLIT) {
    const int64_t per_split = (n_tiles + splits - 1) / splits;
    t_lo = split * per_split < n_tiles ? split * per_split : n_tiles;
    t_hi = t_lo + per_split < n_tiles ? t_lo + per_split : n_tiles;
  }
  const bf16* kbase = k + kh * d;
  const bf16* vbase = v + kh * d;
  auto rows_of = [&](int64_t tile) { return int(s.Tk - tile * kBN < kBN ? s.Tk - tile * kBN : kBN); };

  for (int64_t c0 = t_lo; c0 < t_hi; c0 += kChunk) {
    const int nc = int(t_hi - c0 < kChunk ? t_hi - c0 : kChunk);
    // Classify the chunk's tiles: min / max key position (a partial tile never counts as fully visible).
    __syncthreads();  // the previous chunk's list and bounds are no longer read
#pragma unroll 4
    for (int lt = warp; lt < nc; lt += kWarps) {
      const int64_t j = (c0 + lt) * kBN + lane;
      const int64_t a = j < s.Tk ? k_pos[j] : LLONG_MAX, b = j + 32 < s.Tk ? k_pos[j + 32] : LLONG_MAX;
      const int64_t mn = warp_min_i64(a < b ? a : b), mx = warp_max_i64(a > b ? a : b);
      if (lane == 0) {
        Kmin[lt] = mn;
        Kmax[lt] = mx;
        Keep[lt] = mn <= bq_max;
      }
    }
    __syncthreads();
    if (warp == 0) {  // compact the kept tiles into List, in order
      int n = 0;
      for (int b = 0; b < nc; b += 32) {
        const bool kp = b + lane < nc && Keep[b + lane];
        const unsigned bal = __ballot_sync(0xffffffffu, kp);
        if (kp) List[n + __popc(bal & ((1u << lane) - 1))] = uint16_t(b + lane);
        n += __popc(bal);
      }
      if (lane == 0) list_len = n;
    }
    __syncthreads();
    const int n_list = list_len;
    if (n_list == 0) continue;

    // K and V of kept tile i go to buffer i % 2; tile i + 1 loads while tile i is computed.
    auto load_kv = [&](int i) {
      const int64_t tile = c0 + List[i];
      bf16* kd = reinterpret_cast<bf16*>(smem + SM::kv + (i & 1) * 2 * SM::tile);
      load_tile_async<D, kBN>(kd, kLd, kbase + tile * kBN * kv_ld, kv_ld, rows_of(tile), d);
      load_tile_async<D, kBN>(kd + kBN * kLd, kLd, vbase + tile * kBN * kv_ld, kv_ld, rows_of(tile), d);
      detail::cp_async_commit();
    };
    load_kv(0);
    for (int i = 0; i < n_list; ++i) {
      const int lt = List[i];
      const int64_t tile = c0 + lt;
      detail::cp_async_wait<0>();
      __syncthreads();  // tile i (and Q) landed for everyone; every warp is done with tile i - 1
      if (i + 1 < n_list) load_kv(i + 1);
      const bf16* Ks = reinterpret_cast<const bf16*>(smem + SM::kv + (i & 1) * 2 * SM::tile);
      const bf16* Vs = Ks + kBN * kLd;

      const int64_t kmn = Kmin[lt], kmx = Kmax[lt];
      const bool hidden = kmn > warp_qmax[warp], mixed = !hidden && kmx > warp_qmin[warp];

      float sc[kBN / 8][4];
      if (!hidden) {
        // S = Q K^T for this warp's 16 rows x 64 keys.
#pragma unroll
        for (int nt = 0; nt < kBN / 8; ++nt) sc[nt][0] = sc[nt][1] = sc[nt][2] = sc[nt][3] = 0.0f;
        const bf16* qa = Qs + (warp * 16 + (lane & 15)) * kLd + (lane >> 4) * 8;
        const bf16* kb = Ks + ((lane & 7) + ((lane >> 4) << 3)) * kLd + ((lane >> 3) & 1) * 8;
#pragma unroll
        for (int ks = 0; ks < D / 16; ++ks) {
          uint32_t a[4];
          detail::ldmatrix_x4(a, qa + ks * 16);
#pragma unroll
          for (int np = 0; np < kBN / 16; ++np) {
            uint32_t b[4];
            detail::ldmatrix_x4(b, kb + np * 16 * kLd + ks * 16);
            mma_bf16_16816(sc[2 * np], a, b);
            mma_bf16_16816(sc[2 * np + 1], a, b + 2);
          }
        }
      }
      if (hidden) continue;

      // Scale into log2 units, masking by position on tiles that straddle this warp's rows.
      if (mixed) {
        const int64_t qp_lo = r_lo < rows ? q_pos[m0 + r_lo] : LLONG_MIN;
        const int64_t qp_hi = r_hi < rows ? q_pos[m0 + r_hi] : LLONG_MIN;
#pragma unroll
        for (int nt = 0; nt < kBN / 8; ++nt) {
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int64_t j = tile * kBN + nt * 8 + 2 * t + e;
            const int64_t kp = j < s.Tk ? __ldg(k_pos + j) : LLONG_MAX;
            sc[nt][e] = kp <= qp_lo ? sc[nt][e] * scale_log2 : -INFINITY;
            sc[nt][2 + e] = kp <= qp_hi ? sc[nt][2 + e] * scale_log2 : -INFINITY;
          }
        }
      } else {
#pragma unroll
        for (int nt = 0; nt < kBN / 8; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) sc[nt][e] *= scale_log2;
      }
      float tmax_lo = -INFINITY, tmax_hi = -INFINITY;
#pragma unroll
      for (int nt = 0; nt < kBN / 8; ++nt) {
        tmax_lo = fmaxf(tmax_lo, fmaxf(sc[nt][0], sc[nt][1]));
        tmax_hi = fmaxf(tmax_hi, fmaxf(sc[nt][2], sc[nt][3]));
      }
#pragma unroll
      for (int off = 1; off < 4; off <<= 1) {
        tmax_lo = fmaxf(tmax_lo, __shfl_xor_sync(0xffffffffu, tmax_lo, off));
        tmax_hi = fmaxf(tmax_hi, __shfl_xor_sync(0xffffffffu, tmax_hi, off));
      }
      const float mn_lo = fmaxf(m_lo, tmax_lo), mn_hi = fmaxf(m_hi, tmax_hi);
      // A row that has seen no key yet keeps reference 0 so that exp2(-inf - ref) = 0, never NaN.
      const float ref_lo = mn_lo == -INFINITY ? 0.0f : mn_lo, ref_hi = mn_hi == -INFINITY ? 0.0f : mn_hi;
      const float al_lo = ex2(m_lo - ref_lo), al_hi = ex2(m_hi - ref_hi);
      m_lo = mn_lo;
      m_hi = mn_hi;
      if (__any_sync(0xffffffffu, al_lo != 1.0f || al_hi != 1.0f)) {
#pragma unroll
        for (int nt = 0; nt < kNt; ++nt) {
          o[nt][0] *= al_lo;
          o[nt][1] *= al_lo;
          o[nt][2] *= al_hi;
          o[nt][3] *= al_hi;
        }
      }
      // P = exp2(S - ref), packed into A fragments: k-step kk uses score tiles 2kk and 2kk + 1.
      uint32_t pa[kBN / 16][4];
      float sum_lo = 0.0f, sum_hi = 0.0f;
#pragma unroll
      for (int nt = 0; nt < kBN / 8; ++nt) {
        const float p0 = ex2(sc[nt][0] - ref_lo), p1 = ex2(sc[nt][1] - ref_lo);
        const float p2 = ex2(sc[nt][2] - ref_hi), p3 = ex2(sc[nt][3] - ref_hi);
        sum_lo += p0 + p1;
        sum_hi += p2 + p3;
        pa[nt / 2][(nt % 2) * 2 + 0] = detail::pack_bf16(p0, p1);
        pa[nt / 2][(nt % 2) * 2 + 1] = detail::pack_bf16(p2, p3);
      }
      l_lo = l_lo * al_lo + sum_lo;
      l_hi = l_hi * al_hi + sum_hi;
      // O += P V.
      const bf16* vb = Vs + (lane & 15) * kLd + (lane >> 4) * 8;
#pragma unroll
      for (int kk = 0; kk < kBN / 16; ++kk) {
#pragma unroll
        for (int nt = 0; nt < kNt; nt += 2) {
          uint32_t b[4];
          detail::ldmatrix_x4_trans(b, vb + kk * 16 * kLd + nt * 8);
          mma_bf16_16816(o[nt], pa[kk], b);
          mma_bf16_16816(o[nt + 1], pa[kk], b + 2);
        }
      }
    }
  }

  // Normalise and stage this warp's rows in its own Q rows (bf16), then write 16-byte row pieces.
  detail::cp_async_wait<0>();
  __syncthreads();  // Q has landed even if no tile was kept
#pragma unroll
  for (int off = 1; off < 4; off <<= 1) {
    l_lo += __shfl_xor_sync(0xffffffffu, l_lo, off);
    l_hi += __shfl_xor_sync(0xffffffffu, l_hi, off);
  }
  if constexpr (SPLIT) {  // the unnormalised rows and their (max, sum) for the combine pass
    const int64_t ld = D;
    const int64_t row_lo = (m0 + r_lo) * s.Hq + h, row_hi = (m0 + r_hi) * s.Hq + h;
    float* o_lo = part_o + (row_lo * splits + split) * ld;
    float* o_hi = part_o + (row_hi * splits + split) * ld;
#pragma unroll
    for (int nt = 0; nt < kNt; ++nt) {
      const int c = nt * 8 + 2 * t;
      if (c >= d) continue;
      if (r_lo < rows) *reinterpret_cast<float2*>(o_lo + c) = make_float2(o[nt][0], o[nt][1]);
      if (r_hi < rows) *reinterpret_cast<float2*>(o_hi + c) = make_float2(o[nt][2], o[nt][3]);
    }
    if (t == 0) {
      if (r_lo < rows) *reinterpret_cast<float2*>(part_ml + (row_lo * splits + split) * 2) = make_float2(m_lo, l_lo);
      if (r_hi < rows) *reinterpret_cast<float2*>(part_ml + (row_hi * splits + split) * 2) = make_float2(m_hi, l_hi);
    }
    return;
  }
  const float inv_lo = l_lo > 0.0f ? 1.0f / l_lo : 0.0f, inv_hi = l_hi > 0.0f ? 1.0f / l_hi : 0.0f;
  bf16* stage = Qs + warp * 16 * kLd;
#pragma unroll
  for (int nt = 0; nt < kNt; ++nt) {
    const int c = nt * 8 + 2 * t;
    *reinterpret_cast<uint32_t*>(stage + g * kLd + c) = detail::pack_bf16(o[nt][0] * inv_lo, o[nt][1] * inv_lo);
    *reinterpret_cast<uint32_t*>(stage + (g + 8) * kLd + c) = detail::pack_bf16(o[nt][2] * inv_hi, o[nt][3] * inv_hi);
  }
  __syncwarp();
  constexpr int kCv = D / 8;
#pragma unroll
  for (int i = lane; i < 16 * kCv; i += 32) {
    const int r = i / kCv, c = (i % kCv) * 8;
    if (warp * 16 + r < rows && c < d)
      *reinterpret_cast<uint4*>(out + ((m0 + warp * 16 + r) * s.Hq + h) * d + c) =
          *reinterpret_cast<const uint4*>(stage + r * kLd + c);
  }
}

template <int D>
void launch(const AttentionShape& s, const bf16* q, const bf16* k, const bf16* v, const int64_t* q_pos,
            const int64_t* k_pos, float scale, bf16* out, cudaStream_t stream, int64_t splits = 1,
            float* part_o = nullptr, float* part_ml = nullptr) {
  const size_t smem = Smem<D>::bytes;
  auto* kernel = splits > 1 ? attention_prefill_kernel<D, true> : attention_prefill_kernel<D, false>;
  raise_smem_limit(kernel, smem);
  const int64_t blocks = (s.Tq + kBM - 1) / kBM * s.Hq * splits;
  HYPIC_CUDA_REQUIRE(blocks <= INT_MAX, "attention_prefill: too many query rows x heads");
  kernel<<<unsigned(blocks), kThreads, smem, stream>>>(s, q, k, v, q_pos, k_pos, scale * 1.4426950408889634f, out,
                                                       splits, part_o, part_ml);
  HYPIC_CUDA_LAUNCH_CHECK();
}

int padded_dim(int64_t d) { return d <= 64 ? 64 : (d <= 128 ? 128 : 256); }

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

void check_shape(const AttentionShape& s, const bf16* q, const bf16* k, const bf16* v, const bf16* out) {
  HYPIC_CUDA_REQUIRE(s.Hq > 0 && s.Hkv > 0 && s.Hq % s.Hkv == 0, "attention_prefill: Hq must be a positive multiple of Hkv");
  HYPIC_CUDA_REQUIRE(s.d > 0 && s.d % 8 == 0 && s.d <= 256, "attention_prefill: head dim must be a multiple of 8, <= 256");
  HYPIC_CUDA_REQUIRE(s.Tq >= 0 && s.Tk >= 0, "attention_prefill: negative length");
  HYPIC_CUDA_REQUIRE(aligned16(q) && aligned16(k) && aligned16(v) && aligned16(out),
                     "attention_prefill: q, k, v and out must be 16-byte aligned");
}

void dispatch(const AttentionShape& s, const bf16* q, const bf16* k, const bf16* v, const int64_t* q_pos,
              const int64_t* k_pos, float scale, bf16* out, cudaStream_t stream, int64_t splits, float* part_o,
              float* part_ml) {
  if (attention_prefill_sm90_applies(s))
    return attention_prefill_sm90(s, q, k, v, q_pos, k_pos, scale, out, stream, splits, part_o, part_ml);
  if (s.d <= 64)
    launch<64>(s, q, k, v, q_pos, k_pos, scale, out, stream, splits, part_o, part_ml);
  else if (s.d <= 128)
    launch<128>(s, q, k, v, q_pos, k_pos, scale, out, stream, splits, part_o, part_ml);
  else
    launch<256>(s, q, k, v, q_pos, k_pos, scale, out, stream, splits, part_o, part_ml);
}

}  // namespace

void attention_prefill(const AttentionShape& s, const bf16* q, const bf16* k, const bf16* v, const int64_t* q_pos,
                       const int64_t* k_pos, float scale, bf16* out, cudaStream_t stream) {
  check_shape(s, q, k, v, out);
  if (s.Tq == 0) return;
  dispatch(s, q, k, v, q_pos, k_pos, scale, out, stream, 1, nullptr, nullptr);
}

int64_t attention_prefill_splits(const AttentionShape& s, int sm_count) {
  if (attention_prefill_sm90_applies(s)) return attention_prefill_sm90_splits(s, sm_count);
  const int64_t blocks = (s.Tq + kBM - 1) / kBM * s.Hq, tiles = (s.Tk + kBN - 1) / kBN;
  if (blocks <= 0 || blocks >= sm_count) return 1;
  // Up to two blocks per SM, rounded down: one block past a whole wave would cost a wave of its own
  // (32 query-tile blocks of the stitch took 9 splits, 288 blocks, before: 8 fill 256 slots).
  int64_t n = 2 * int64_t(sm_count) / blocks;
  const int64_t by_tiles = tiles / 4;  // at least 4 key tiles per split, or the combine costs more than it saves
  n = n < by_tiles ? n : by_tiles;
  return n < 1 ? 1 : (n > kMaxPrefillSplits ? kMaxPrefillSplits : n);
}

size_t attention_prefill_workspace_bytes(const AttentionShape& s, int64_t splits) {
  return splits <= 1 ? 0 : sizeof(float) * size_t(s.Tq * s.Hq * splits) * size_t(padded_dim(s.d) + 2);
}

static_assert(kMaxPrefillSplits <= detail::kCombineMaxSplits, "the combine pass holds every split's weight");

void attention_prefill_split(const AttentionShape& s, const bf16* q, const bf16* k, const bf16* v,
                             const int64_t* q_pos, const int64_t* k_pos, float scale, int64_t splits, void* workspace,
                             bf16* out, cudaStream_t stream) {
  check_shape(s, q, k, v, out);
  HYPIC_CUDA_REQUIRE(splits >= 1 && splits <= kMaxPrefillSplits, "attention_prefill_split: splits out of range");
  HYPIC_CUDA_REQUIRE(splits == 1 || workspace != nullptr, "attention_prefill_split: no workspace");
  if (s.Tq == 0) return;
  if (splits == 1) return dispatch(s, q, k, v, q_pos, k_pos, scale, out, stream, 1, nullptr, nullptr);
  const int64_t ld = padded_dim(s.d);
  float* part_o = static_cast<float*>(workspace);
  float* part_ml = part_o + s.Tq * s.Hq * splits * ld;
  dispatch(s, q, k, v, q_pos, k_pos, scale, out, stream, splits, part_o, part_ml);
  detail::split_combine(splits, s.Tq * s.Hq, s.d, ld, part_o, part_ml, out, stream, detail::pdl_chain_enabled());
  HYPIC_CUDA_LAUNCH_CHECK();
}

}  // namespace hypic::cuda
