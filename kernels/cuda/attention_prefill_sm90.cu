// Hopper-native attention prefill for head dim 256 (Qwen3-Next / Qwen3.5 attention layers): bulk tensor
// copies (TMA) into 128-byte-swizzled shared memory, wgmma from shared memory, one producer warpgroup and
// two consumer warpgroups (FA3's division of work; written from the PTX manual, no code taken).
//
// Block = 128 query rows of one query head, 384 threads:
//   warpgroup 0 (producer, 40 registers a thread): classifies the key tiles by position (a chunk of 256
//     tiles at a time, all four warps), then one thread streams the kept tiles' K and V through two
//     shared-memory stages, each stage's K and V on their own mbarrier so that Q K^T starts before V lands;
//   warpgroups 1 and 2 (consumers, 232 registers): 64 query rows each; per tile S = Q K^T (16 wgmma
//     m64n64k16, both operands in shared memory), the online softmax on the accumulators, then
//     O += P V (4 wgmma m64n256k16, P straight from registers, V transposed by the descriptor).
// Tiles of 64 keys. Positions are arbitrary (keys from several cached segments plus fresh rows): a tile is
// skipped when every key lies after the block's last query, not computed by a warpgroup whose queries all
// precede it, and masked per element only when its positions straddle the warpgroup's queries (on a causal
// prefill: the diagonal tiles and a partial last tile).
// Split form: as attention_prefill_split, a key-tile range per block and unnormalised partial rows out.
#include <climits>
#include <cstdlib>
#include <cstring>

#include <cudaTypedefs.h>

#include "kernels/cuda/attention.h"
#include "kernels/cuda/attention_prefill_sm90.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/mma.cuh"
#include "kernels/cuda/sm90.cuh"

namespace hypic::cuda {
namespace {

constexpr int kD = 256, kBM = 128, kBN = 64, kStages = 2, kChunk = 256, kThreads = 384;
constexpr uint32_t kBox = 64 * 128;                 // bytes of one 64-row x 64-column box
constexpr uint32_t kTileBytes = kBN * kD * 2;       // one K (or V) tile
constexpr int kProducerRegs = 40, kConsumerRegs = 232;

struct StageMeta {
  int64_t tile, kmin, kmax, pad;
};

// Offsets from the 1024-aligned base of dynamic shared memory.
struct Layout {
  static constexpr uint32_t q = 0;                       // [wg 2][chunk 4] boxes of 64 rows x 64 dims
  static constexpr uint32_t kv = q + 2 * 4 * kBox;       // [stage][K 4 boxes, V 4 boxes]
  static constexpr uint32_t meta = kv + kStages * 2 * kTileBytes;
  static constexpr uint32_t bars = meta + kStages * sizeof(StageMeta);  // q_full, full_k[2], full_v[2], empty[2]
  static constexpr uint32_t qrange = bars + 8 * 8;       // int64 qmin[4], qmax[4] (32 rows each)
  static constexpr uint32_t kmin = qrange + 8 * 8;
  static constexpr uint32_t kmax = kmin + 8 * kChunk;
  static constexpr uint32_t keep = kmax + 8 * kChunk;
  static constexpr uint32_t bytes = keep + kChunk;
  static constexpr uint32_t alloc = bytes + 1024;        // slack to align the base
};
static_assert(Layout::alloc <= 227 * 1024, "fits one H100/H200 block");

__device__ __forceinline__ float ex2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
__device__ __forceinline__ int64_t warp_min_i64(int64_t v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const int64_t u = __shfl_xor_sync(0xffffffffu, static_cast<long long>(v), o);
    v = u < v ? u : v;
  }
  return v;
}
__device__ __forceinline__ int64_t warp_max_i64(int64_t v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const int64_t u = __shfl_xor_sync(0xffffffffu, static_cast<long long>(v), o);
    v = u > v ? u : v;
  }
  return v;
}

template <bool SPLIT>
__global__ void __launch_bounds__(kThreads, 1)
    attention_sm90_kernel(const __grid_constant__ CUtensorMap tq, const __grid_constant__ CUtensorMap tk,
                          const __grid_constant__ CUtensorMap tv, AttentionShape s, const int64_t* __restrict__ q_pos,
                          const int64_t* __restrict__ k_pos, float scale_log2, bf16* __restrict__ out,
                          int64_t splits_arg, float* __restrict__ part_o, float* __restrict__ part_ml) {
#if HYPIC_SM90A
  using namespace sm90;
  extern __shared__ unsigned char smem_raw[];
  unsigned char* smem = reinterpret_cast<unsigned char*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  StageMeta* meta = reinterpret_cast<StageMeta*>(smem + Layout::meta);
  uint64_t* bars = reinterpret_cast<uint64_t*>(smem + Layout::bars);
  uint64_t* q_full = bars;
  uint64_t* full_k = bars + 1;
  uint64_t* full_v = bars + 1 + kStages;
  uint64_t* empty = bars + 1 + 2 * kStages;
  int64_t* qmin = reinterpret_cast<int64_t*>(smem + Layout::qrange);
  int64_t* qmax = qmin + 4;

  const int tid = int(threadIdx.x), warp = tid / 32, lane = tid % 32;
  const int64_t splits = SPLIT ? splits_arg : 1;
  // Launch order: latest query tile first (the most keys); the query heads of one kv head side by side.
  const int64_t n_mt = (s.Tq + kBM - 1) / kBM;
  const int64_t split = int64_t(blockIdx.x) % splits, bid = int64_t(blockIdx.x) / splits;
  const int64_t h = bid % s.Hq, kh = h / (s.Hq / s.Hkv);
  const int64_t m0 = (n_mt - 1 - bid / s.Hq) * kBM;
  const int rows = int(s.Tq - m0 < kBM ? s.Tq - m0 : kBM);

  if (tid < kBM) {  // position range of each 32 query rows (valid rows only)
    const bool ok = tid < rows;
    const int64_t p = ok ? q_pos[m0 + tid] : 0;
    const int64_t mn = warp_min_i64(ok ? p : LLONG_MAX), mx = warp_max_i64(ok ? p : LLONG_MIN);
    if (lane == 0) {
      qmin[warp] = mn;
      qmax[warp] = mx;
    }
  }
  if (tid == kBM) {
    mbar_init(q_full, 1);
    for (int i = 0; i < kStages; ++i) {
      mbar_init(full_k + i, 1);
      mbar_init(full_v + i, 1);
      mbar_init(empty + i, 8);  // lane 0 of each consumer warp
    }
    mbar_fence_init();
  }
  __syncthreads();

  const int64_t n_tiles = (s.Tk + kBN - 1) / kBN;
  int64_t t_lo = 0, t_hi = n_tiles;
  if constexpr (SPLIT) {
    const int64_t per_split = (n_tiles + splits - 1) / splits;
    t_lo = split * per_split < n_tiles ? split * per_split : n_tiles;
    t_hi = t_lo + per_split < n_tiles ? t_lo + per_split : n_tiles;
  }

  if (warp < 4) {
    // ---------------- producer ----------------
    setmaxnreg_dec<kProducerRegs>();
    int64_t* kmin_s = reinterpret_cast<int64_t*>(smem + Layout::kmin);
    int64_t* kmax_s = reinterpret_cast<int64_t*>(smem + Layout::kmax);
    uint8_t* keep_s = smem + Layout::keep;
    const int64_t bq_max = qmax[0] > qmax[1] ? (qmax[0] > qmax[2] ? (qmax[0] > qmax[3] ? qmax[0] : qmax[3])
                                                                  : (qmax[2] > qmax[3] ? qmax[2] : qmax[3]))
                                             : (qmax[1] > qmax[2] ? (qmax[1] > qmax[3] ? qmax[1] : qmax[3])
                                                                  : (qmax[2] > qmax[3] ? qmax[2] : qmax[3]));
    if (tid == 0) {
      prefetch_tensor_map(&tq);
      prefetch_tensor_map(&tk);
      prefetch_tensor_map(&tv);
      mbar_arrive_expect_tx(q_full, 2 * 4 * kBox);
      for (int w = 0; w < 2; ++w)
        for (int c = 0; c < 4; ++c)
          tma_load_2d(smem + Layout::q + (w * 4 + c) * kBox, &tq, int(h * kD + c * 64), int(m0 + w * 64), q_full);
    }
    int stage = 0;
    uint32_t phase = 0;
    for (int64_t c0 = t_lo; c0 < t_hi; c0 += kChunk) {
      const int nc = int(t_hi - c0 < kChunk ? t_hi - c0 : kChunk);
      named_barrier(1, 128);  // the previous chunk's classification is no longer read
#pragma unroll 4
      for (int lt = warp; lt < nc; lt += 4) {
        const int64_t j = (c0 + lt) * kBN + lane;
        const int64_t a = j < s.Tk ? k_pos[j] : LLONG_MAX, b = j + 32 < s.Tk ? k_pos[j + 32] : LLONG_MAX;
        const int64_t mn = warp_min_i64(a < b ? a : b), mx = warp_max_i64(a > b ? a : b);
        if (lane == 0) {
          kmin_s[lt] = mn;
          kmax_s[lt] = mx;
          keep_s[lt] = mn <= bq_max;
        }
      }
      named_barrier(1, 128);
      if (tid == 0) {
        for (int lt = 0; lt < nc; ++lt) {
          if (!keep_s[lt]) continue;
          const int64_t tile = c0 + lt;
          mbar_wait(empty + stage, phase ^ 1);
          meta[stage] = StageMeta{tile, kmin_s[lt], kmax_s[lt], 0};
          unsigned char* kst = smem + Layout::kv + stage * 2 * kTileBytes;
          mbar_arrive_expect_tx(full_k + stage, kTileBytes);
          for (int c = 0; c < 4; ++c)
            tma_load_2d(kst + c * kBox, &tk, int(kh * kD + c * 64), int(tile * kBN), full_k + stage);
          mbar_arrive_expect_tx(full_v + stage, kTileBytes);
          for (int c = 0; c < 4; ++c)
            tma_load_2d(kst + kTileBytes + c * kBox, &tv, int(kh * kD + c * 64), int(tile * kBN), full_v + stage);
          if (++stage == kStages) {
            stage = 0;
            phase ^= 1;
          }
        }
      }
      __syncwarp();
    }
    if (tid == 0) {  // end of the stream
      mbar_wait(empty + stage, phase ^ 1);
      meta[stage].tile = -1;
      mbar_arrive(full_k + stage);
    }
    return;
  }

  // ---------------- consumers ----------------
  setmaxnreg_inc<kConsumerRegs>();
  const int wg = warp / 4 - 1, wt = tid % 128, ww = wt / 32, g = lane >> 2, t = lane & 3;
  const int r_lo = wg * 64 + ww * 16 + g, r_hi = r_lo + 8;  // block rows of this thread
  const int64_t qp_lo = r_lo < rows ? q_pos[m0 + r_lo] : LLONG_MIN;
  const int64_t qp_hi = r_hi < rows ? q_pos[m0 + r_hi] : LLONG_MIN;
  const int64_t wg_qmin = qmin[2 * wg] < qmin[2 * wg + 1] ? qmin[2 * wg] : qmin[2 * wg + 1];
  const int64_t wg_qmax = qmax[2 * wg] > qmax[2 * wg + 1] ? qmax[2 * wg] : qmax[2 * wg + 1];
  const unsigned char* q_wg = smem + Layout::q + wg * 4 * kBox;

  float o[128];
#pragma unroll
  for (int i = 0; i < 128; ++i) o[i] = 0.0f;
  float m_lo = -INFINITY, m_hi = -INFINITY, l_lo = 0.0f, l_hi = 0.0f;

  mbar_wait(q_full, 0);
  int stage = 0;
  uint32_t phase = 0;
  for (;;) {
    mbar_wait(full_k + stage, phase);
    const StageMeta mt = meta[stage];
    if (mt.tile < 0) break;
    const bool hidden = mt.kmin > wg_qmax, mixed = !hidden && mt.kmax > wg_qmin;
    if (!hidden) {
      const unsigned char* kst = smem + Layout::kv + stage * 2 * kTileBytes;
      float sc[32];
      wgmma_fence();
#pragma unroll
      for (int ks = 0; ks < kD / 16; ++ks) {
        const uint32_t off = (ks / 4) * kBox + (ks % 4) * 32;
        wgmma_m64n64k16_ss(sc, desc_sw128(q_wg + off, 16, 1024), desc_sw128(kst + off, 16, 1024), ks > 0);
      }
      wgmma_commit();
      wgmma_wait<0>();
      fence_regs(sc);

      // Scale into log2 units; mask by position where the tile straddles this warpgroup's queries.
      if (mixed) {
#pragma unroll
        for (int j = 0; j < 8; ++j) {
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int64_t key = mt.tile * kBN + j * 8 + 2 * t + e;
            const int64_t kp = key < s.Tk ? __ldg(k_pos + key) : LLONG_MAX;
            sc[4 * j + e] = kp <= qp_lo ? sc[4 * j + e] * scale_log2 : -INFINITY;
            sc[4 * j + 2 + e] = kp <= qp_hi ? sc[4 * j + 2 + e] * scale_log2 : -INFINITY;
          }
        }
      } else {
#pragma unroll
        for (int i = 0; i < 32; ++i) sc[i] *= scale_log2;
      }
      float tmax_lo = -INFINITY, tmax_hi = -INFINITY;
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        tmax_lo = fmaxf(tmax_lo, fmaxf(sc[4 * j], sc[4 * j + 1]));
        tmax_hi = fmaxf(tmax_hi, fmaxf(sc[4 * j + 2], sc[4 * j + 3]));
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
      uint32_t pa[4][4];
      float sum_lo = 0.0f, sum_hi = 0.0f;
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const float p0 = ex2(sc[4 * j] - ref_lo), p1 = ex2(sc[4 * j + 1] - ref_lo);
        const float p2 = ex2(sc[4 * j + 2] - ref_hi), p3 = ex2(sc[4 * j + 3] - ref_hi);
        sum_lo += p0 + p1;
        sum_hi += p2 + p3;
        pa[j / 2][(j % 2) * 2 + 0] = detail::pack_bf16(p0, p1);
        pa[j / 2][(j % 2) * 2 + 1] = detail::pack_bf16(p2, p3);
      }
      l_lo = l_lo * al_lo + sum_lo;
      l_hi = l_hi * al_hi + sum_hi;
      if (__any_sync(0xffffffffu, al_lo != 1.0f || al_hi != 1.0f)) {
#pragma unroll
        for (int j = 0; j < 32; ++j) {
          o[4 * j] *= al_lo;
          o[4 * j + 1] *= al_lo;
          o[4 * j + 2] *= al_hi;
          o[4 * j + 3] *= al_hi;
        }
      }
      mbar_wait(full_v + stage, phase);
      const unsigned char* vst = kst + kTileBytes;
      fence_regs(o);
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < kBN / 16; ++kk) wgmma_m64n256k16_rs(o, pa[kk], desc_sw128(vst + kk * 16 * 128, kBox, 1024));
      wgmma_commit();
      wgmma_wait<0>();
      fence_regs(o);
    }
    __syncwarp();
    if (lane == 0) mbar_arrive(empty + stage);
    if (++stage == kStages) {
      stage = 0;
      phase ^= 1;
    }
  }

#pragma unroll
  for (int off = 1; off < 4; off <<= 1) {
    l_lo += __shfl_xor_sync(0xffffffffu, l_lo, off);
    l_hi += __shfl_xor_sync(0xffffffffu, l_hi, off);
  }
  if constexpr (SPLIT) {  // the unnormalised rows and their (max, sum) for the combine pass
    const int64_t row_lo = (m0 + r_lo) * s.Hq + h, row_hi = (m0 + r_hi) * s.Hq + h;
    float* o_lo = part_o + (row_lo * splits + split) * kD;
    float* o_hi = part_o + (row_hi * splits + split) * kD;
#pragma unroll
    for (int j = 0; j < 32; ++j) {
      const int c = j * 8 + 2 * t;
      if (r_lo < rows) *reinterpret_cast<float2*>(o_lo + c) = make_float2(o[4 * j], o[4 * j + 1]);
      if (r_hi < rows) *reinterpret_cast<float2*>(o_hi + c) = make_float2(o[4 * j + 2], o[4 * j + 3]);
    }
    if (t == 0) {
      if (r_lo < rows) *reinterpret_cast<float2*>(part_ml + (row_lo * splits + split) * 2) = make_float2(m_lo, l_lo);
      if (r_hi < rows) *reinterpret_cast<float2*>(part_ml + (row_hi * splits + split) * 2) = make_float2(m_hi, l_hi);
    }
    return;
  }
  const float inv_lo = l_lo > 0.0f ? 1.0f / l_lo : 0.0f, inv_hi = l_hi > 0.0f ? 1.0f / l_hi : 0.0f;
  bf16* out_lo = out + ((m0 + r_lo) * s.Hq + h) * kD;
  bf16* out_hi = out + ((m0 + r_hi) * s.Hq + h) * kD;
#pragma unroll
  for (int j = 0; j < 32; ++j) {
    const int c = j * 8 + 2 * t;
    if (r_lo < rows) *reinterpret_cast<uint32_t*>(out_lo + c) = detail::pack_bf16(o[4 * j] * inv_lo, o[4 * j + 1] * inv_lo);
    if (r_hi < rows)
      *reinterpret_cast<uint32_t*>(out_hi + c) = detail::pack_bf16(o[4 * j + 2] * inv_hi, o[4 * j + 3] * inv_hi);
  }
#endif
}

PFN_cuTensorMapEncodeTiled_v12000 encode_fn() {
  static PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult q{};
    HYPIC_CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &q));
    HYPIC_CUDA_REQUIRE(q == cudaDriverEntryPointSuccess && p != nullptr, "attention_prefill: no cuTensorMapEncodeTiled");
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(p);
  }();
  return fn;
}

// rows x width bf16 matrix (row stride = width), read in boxes of 64 rows x 64 columns, 128-byte swizzle.
CUtensorMap tensor_map(const bf16* base, int64_t width, int64_t rows) {
  CUtensorMap m;
  const cuuint64_t dims[2] = {cuuint64_t(width), cuuint64_t(rows)};
  const cuuint64_t strides[1] = {cuuint64_t(width) * sizeof(bf16)};
  const cuuint32_t box[2] = {64, 64}, elem[2] = {1, 1};
  const CUresult r = encode_fn()(&m, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, const_cast<bf16*>(base), dims, strides, box,
                                 elem, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                 CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  HYPIC_CUDA_REQUIRE(r == CUDA_SUCCESS, "attention_prefill: cuTensorMapEncodeTiled failed");
  return m;
}

// Read on every call (a getenv is cheap next to a launch) so that a bench can time both forms in one process.
bool env_enabled() {
  const char* e = std::getenv("HYPIC_CUDA_ATTN_SM90");
  return !(e && std::strcmp(e, "0") == 0);
}

}  // namespace

bool attention_prefill_sm90_applies(const AttentionShape& s) {
  if (!env_enabled() || s.d != kD || s.Tq <= 0 || s.Tk <= 0) return false;
  if (s.Tq > int64_t(INT_MAX) - kBM || s.Tk > int64_t(INT_MAX) - kBN) return false;  // TMA coordinates are int32
  int dev = 0, major = 0, minor = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return false;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess)
    return false;
  return major == 9 && minor == 0;  // sm_90a code runs on compute capability 9.0 only
}

int64_t attention_prefill_sm90_splits(const AttentionShape& s, int sm_count) {
  const int64_t blocks = (s.Tq + kBM - 1) / kBM * s.Hq, tiles = (s.Tk + kBN - 1) / kBN;
  if (blocks <= 0 || blocks >= sm_count) return 1;
  // One block an SM (its shared memory), rounded down to whole waves; at least 4 key tiles a split.
  int64_t n = int64_t(sm_count) / blocks;
  const int64_t by_tiles = tiles / 4;
  n = n < by_tiles ? n : by_tiles;
  return n < 1 ? 1 : (n > kMaxPrefillSplits ? kMaxPrefillSplits : n);
}

void attention_prefill_sm90(const AttentionShape& s, const bf16* q, const bf16* k, const bf16* v, const int64_t* q_pos,
                            const int64_t* k_pos, float scale, bf16* out, cudaStream_t stream, int64_t splits,
                            float* part_o, float* part_ml) {
  HYPIC_CUDA_REQUIRE(s.d == kD, "attention_prefill_sm90: head dim 256 only");
  const CUtensorMap tq = tensor_map(q, s.Hq * kD, s.Tq);
  const CUtensorMap tk = tensor_map(k, s.Hkv * kD, s.Tk);
  const CUtensorMap tv = tensor_map(v, s.Hkv * kD, s.Tk);
  auto* kernel = splits > 1 ? attention_sm90_kernel<true> : attention_sm90_kernel<false>;
  HYPIC_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(Layout::alloc)));
  const int64_t blocks = (s.Tq + kBM - 1) / kBM * s.Hq * splits;
  HYPIC_CUDA_REQUIRE(blocks <= INT_MAX, "attention_prefill: too many query rows x heads");
  kernel<<<unsigned(blocks), kThreads, Layout::alloc, stream>>>(tq, tk, tv, s, q_pos, k_pos,
                                                               scale * 1.4426950408889634f, out, splits, part_o, part_ml);
  HYPIC_CUDA_LAUNCH_CHECK();
}

}  // namespace hypic::cuda
