// Hopper products of few rows (gemm_skinny_sm90.h). Written from the PTX manual.
//
// Work item = one block: BW = 128 * MB weight rows (output columns n0 .. n0 + BW) x one of S slices of K. The
// S blocks of a tile form a cluster (grid.x = S); each sums its slice into registers, stages the sums in its
// shared memory, and after a cluster barrier block r adds up rows r, r + S, ... of the tile from all S blocks
// in order 0 .. S-1 (distributed shared memory) and writes them.
// Block = 384 threads:
//   warpgroup 0 (producer): thread 0 loads each stage's weight box (BW rows x 64 columns) and row box
//     (NP rows x 64 columns; rows past M are zero-filled) by TMA on the stage's mbarrier. The weight boxes of
//     the first stages are requested before the kernel waits for its predecessor (programmatic launch).
//   warpgroups 1 and 2 (consumers): MB x 64 weight rows each; per 64-wide k step 4 x MB wgmma m64nNPk16 with
//     both operands in shared memory (weights as A, the rows as B), one group in flight.
// Four stages of (BW + NP) x 128 bytes.
#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <unordered_map>
#include <utility>

#include "kernels/cuda/check.h"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/env_switch.h"
#include "kernels/cuda/gemm_skinny_sm90.h"
#include "kernels/cuda/mma.cuh"
#include "kernels/cuda/pdl_launch.cuh"
#include "kernels/cuda/sm90.cuh"
#include "kernels/cuda/sm90_host.h"
#include "kernels/cuda/smem_limit.h"
#include "kernels/cuda/wgmma_ss.cuh"

namespace hypic::cuda {
namespace {

constexpr int kThreads = 384, kStages = 4, kBK = 64, kMaxSplits = 8, kMaxTargets = kGemmSkinnyMaxTargets;
enum Mode { kStoreBf16 = 0, kStoreF32 = 1, kAddF32 = 2 };

template <int NP, int MB>
struct SkinnySmem {
  static constexpr int bw = 128 * MB;
  static constexpr uint32_t stage_bytes = uint32_t(bw + NP) * 128;
  static constexpr uint32_t bars = kStages * stage_bytes;  // full[kStages], empty[kStages]
  static constexpr uint32_t alloc = bars + 2 * kStages * 8 + 1024;  // + slack to align the base to 1024
  // The tile's sums, [NP rows][bw + 4 floats] (4 mod 32 words a row: the staging stores do not conflict),
  // over the stages once the k loop is done.
  static constexpr int red_ld = bw + 4;
  static_assert(uint32_t(NP) * red_ld * 4 <= bars, "the sums fit over the stages");
  static_assert(alloc <= 227 * 1024, "fits one H100/H200 block");
  static_assert(stage_bytes % 1024 == 0 && (bw * 128) % 1024 == 0, "swizzle atoms stay 1024-aligned");
};

// One launch's products (up to kMaxTargets weight matrices against the same rows): target t owns tiles
// [tile0[t], tile0[t + 1]) of blockIdx.y.
struct SkinnyOut {
  void* y;
  int ldy, N, mode, tile0;
  int vec;  // N % 4, ldy % 4 and y's 16 bytes allow whole-group stores
};
struct SkinnyArgs {
  SkinnyOut out[kMaxTargets];
  int targets, M, KT, kt_per;
  int early;  // let a programmatic successor start once this grid runs (detail::pdl_trigger_early)
};

template <int NP, int MB>
__global__ void __launch_bounds__(kThreads, 1)
    skinny_sm90_kernel(const __grid_constant__ CUtensorMap w0, const __grid_constant__ CUtensorMap w1,
                       const __grid_constant__ CUtensorMap w2, const __grid_constant__ CUtensorMap xmap,
                       const __grid_constant__ SkinnyArgs a) {
#if HYPIC_SM90A
  using namespace sm90;
  using L = SkinnySmem<NP, MB>;
  constexpr int BW = L::bw;
  extern __shared__ unsigned char smem_raw[];
  unsigned char* smem = reinterpret_cast<unsigned char*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  uint64_t* full = reinterpret_cast<uint64_t*>(smem + L::bars);
  uint64_t* empty = full + kStages;
  const int tid = int(threadIdx.x), warp = tid / 32, lane = tid % 32;
  const int S = int(gridDim.x), split = int(blockIdx.x), tile = int(blockIdx.y);
  const int t = (a.targets > 2 && tile >= a.out[2].tile0) ? 2 : (a.targets > 1 && tile >= a.out[1].tile0) ? 1 : 0;
  const SkinnyOut& out = a.out[t];
  const CUtensorMap* wmap = t == 0 ? &w0 : t == 1 ? &w1 : &w2;
  const int M = a.M, N = out.N, n0 = (tile - out.tile0) * BW, mode = out.mode, ldy = out.ldy, vec = out.vec;
  void* y = out.y;
  const int kt0 = split * a.kt_per, kt1 = min(a.KT, kt0 + a.kt_per), steps = max(0, kt1 - kt0);

  if (tid == 0) {
    for (int i = 0; i < kStages; ++i) {
      mbar_init(full + i, 1);  // the producer's arrival with both boxes' byte count
      mbar_init(empty + i, 8);  // lane 0 of each consumer warp
    }
    mbar_fence_init();
  }
  __syncthreads();

  if (warp < 4) {
    // ---------------- producer ----------------
    setmaxnreg_dec<40>();
    if (tid == 0) {
      prefetch_tensor_map(wmap);
      prefetch_tensor_map(&xmap);
      const int pre = min(kStages, steps);
      // The weights are constant: their first boxes load while the predecessor still runs.
      for (int i = 0; i < pre; ++i) {
        unsigned char* sw = smem + i * L::stage_bytes;
        mbar_arrive_expect_tx(full + i, L::stage_bytes);
        tma_load_2d(sw, wmap, (kt0 + i) * kBK, n0, full + i);
      }
      detail::pdl_wait();  // the rows are the predecessor's output
      for (int i = 0; i < pre; ++i)
        tma_load_2d(smem + i * L::stage_bytes + BW * 128, &xmap, (kt0 + i) * kBK, 0, full + i);
      int stage = pre % kStages;
      uint32_t phase = pre == kStages ? 1 : 0;
      for (int i = pre; i < steps; ++i) {
        mbar_wait(empty + stage, phase ^ 1);
        unsigned char* sw = smem + stage * L::stage_bytes;
        mbar_arrive_expect_tx(full + stage, L::stage_bytes);
        tma_load_2d(sw, wmap, (kt0 + i) * kBK, n0, full + stage);
        tma_load_2d(sw + BW * 128, &xmap, (kt0 + i) * kBK, 0, full + stage);
        if (++stage == kStages) {
          stage = 0;
          phase ^= 1;
        }
      }
    }
    __syncwarp();
    cluster_sync();  // the consumers staged their sums
    cluster_sync();  // every block of the cluster has read them
  } else {
    // ---------------- consumers ----------------
    setmaxnreg_inc<232>();
    detail::pdl_wait();  // y may be the predecessor's (accumulate) or still read by it
    if (a.early) detail::pdl_trigger();
    const int wg = warp / 4 - 1, w = warp % 4, g = lane / 4, q = lane % 4;
    float acc[MB][NP / 2];
#pragma unroll
    for (int mb = 0; mb < MB; ++mb)
#pragma unroll
      for (int i = 0; i < NP / 2; ++i) acc[mb][i] = 0.0f;
    int stage = 0, prev = -1;
    uint32_t phase = 0;
    for (int i = 0; i < steps; ++i) {
      mbar_wait(full + stage, phase);
      const unsigned char* sw = smem + stage * L::stage_bytes + wg * MB * 64 * 128;
      const unsigned char* sx = smem + stage * L::stage_bytes + BW * 128;
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < kBK / 16; ++kk)
#pragma unroll
        for (int mb = 0; mb < MB; ++mb)
          wgmma_kmajor_ss<NP>(acc[mb], desc_sw128(sw + mb * 64 * 128 + 32 * kk, 16, 1024),
                              desc_sw128(sx + 32 * kk, 16, 1024), 1);
      wgmma_commit();
      wgmma_wait<1>();
      if (prev >= 0) {
        __syncwarp();
        if (lane == 0) mbar_arrive(empty + prev);
      }
      prev = stage;
      if (++stage == kStages) {
        stage = 0;
        phase ^= 1;
      }
    }
    wgmma_wait<0>();
#pragma unroll
    for (int mb = 0; mb < MB; ++mb) fence_regs(acc[mb]);
    named_barrier(1, 256);  // both consumer warpgroups are done with the stages

    // Thread (w, g, q) of block mb holds weight rows 16 w + g (+ 8) of its 64 and rows 8 j + 2 q (+ 1):
    // output (row 8 j + 2 q + e, column (wg MB + mb) 64 + 16 w + g + 8 h) = acc[mb][4 j + 2 h + e].
    float* red = reinterpret_cast<float*>(smem);
#pragma unroll
    for (int mb = 0; mb < MB; ++mb) {
      const int c = (wg * MB + mb) * 64 + 16 * w + g;
#pragma unroll
      for (int j = 0; j < NP / 8; ++j)
#pragma unroll
        for (int h = 0; h < 2; ++h)
#pragma unroll
          for (int e = 0; e < 2; ++e) red[(8 * j + 2 * q + e) * L::red_ld + c + 8 * h] = acc[mb][4 * j + 2 * h + e];
    }
    cluster_sync();

    // Block `split` writes rows split, split + S, ...: the sum over the cluster's blocks in rank order.
    const int q4 = BW / 4, mine = M > split ? (M - split + S - 1) / S : 0;
    const uint32_t red_base = smem_u32(red);
    for (int idx = tid - 128; idx < mine * q4; idx += 256) {
      const int r = split + S * (idx / q4), c4 = idx % q4, n = n0 + 4 * c4;
      if (n >= N) continue;
      const uint32_t off = red_base + uint32_t((r * L::red_ld + 4 * c4) * 4);
      float4 s = make_float4(0.f, 0.f, 0.f, 0.f);
      for (int b = 0; b < S; ++b) {
        float4 v;
        asm volatile(
            "{\n.reg .b32 ra;\nmapa.shared::cluster.u32 ra, %4, %5;\n"
            "ld.shared::cluster.v4.f32 {%0, %1, %2, %3}, [ra];\n}\n"
            : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
            : "r"(off), "r"(b)
            : "memory");
        s.x += v.x;
        s.y += v.y;
        s.z += v.z;
        s.w += v.w;
      }
      const int64_t at = int64_t(r) * ldy + n;
      if (!vec) {  // a narrow output (the shared expert's one-column gate) or an unaligned one: element by element
        const float v4[4] = {s.x, s.y, s.z, s.w};
        for (int e = 0; e < 4 && n + e < N; ++e) {
          if (mode == kStoreBf16) {
            static_cast<bf16*>(y)[at + e] = __float2bfloat16_rn(v4[e]);
          } else {
            float* dst = static_cast<float*>(y) + at + e;
            *dst = mode == kAddF32 ? *dst + v4[e] : v4[e];
          }
        }
      } else if (mode == kStoreBf16) {
        uint2 pk;
        pk.x = detail::pack_bf16(s.x, s.y);
        pk.y = detail::pack_bf16(s.z, s.w);
        *reinterpret_cast<uint2*>(static_cast<bf16*>(y) + at) = pk;
      } else {
        float4* dst = reinterpret_cast<float4*>(static_cast<float*>(y) + at);
        if (mode == kAddF32) {
          const float4 prior = *dst;
          s.x += prior.x;
          s.y += prior.y;
          s.z += prior.z;
          s.w += prior.w;
        }
        *dst = s;
      }
    }
    cluster_sync();
  }
#else
  // Built without the sm_90a target (plain sm_90): fail loudly rather than return nothing on a Hopper GPU.
  __trap();
#endif
}

int padded_rows(int64_t M) {
  for (int np : {16, 32, 64, 96, 128, 160, 192})
    if (M <= np) return np;
  return 256;
}

// Tensor maps are a pure function of their arguments, so a map encoded once serves every later call with the
// same ones (the encode is host time on every product otherwise).
struct MapKey {
  const void* p;
  int64_t width, rows, stride;
  uint32_t box;
  bool operator==(const MapKey& o) const {
    return p == o.p && width == o.width && rows == o.rows && stride == o.stride && box == o.box;
  }
};
struct MapKeyHash {
  size_t operator()(const MapKey& k) const {
    size_t h = std::hash<const void*>()(k.p);
    for (int64_t v : {k.width, k.rows, k.stride, int64_t(k.box)}) h = h * 1000003u ^ std::hash<int64_t>()(v);
    return h;
  }
};
CUtensorMap cached_map(const bf16* base, int64_t width, int64_t rows, int64_t stride, uint32_t box) {
  static std::mutex mu;
  static std::unordered_map<MapKey, CUtensorMap, MapKeyHash> maps;
  const MapKey k{base, width, rows, stride, box};
  std::lock_guard<std::mutex> g(mu);
  auto it = maps.find(k);
  if (it != maps.end()) return it->second;
  if (maps.size() >= 8192) maps.clear();  // activations move between calls; keep the table bounded
  const CUtensorMap m = tensor_map_sw128(base, width, rows, stride, box, "gemm_skinny");
  maps.emplace(k, m);
  return m;
}

using Plan = GemmSkinnyPlan;

int64_t tiles_of(const int64_t* Ns, int n, int cols) {
  int64_t tiles = 0;
  for (int i = 0; i < n; ++i) tiles += (Ns[i] + cols - 1) / cols;
  return tiles;
}

// How many clusters of S blocks (index S, 1..8) can be resident at once.
using Capacity = std::array<int, kMaxSplits + 1>;

Capacity ideal_capacity(int sms) {
  Capacity c{};
  for (int s = 1; s <= kMaxSplits; ++s) c[s] = s == 1 ? std::max(1, sms) : sms / s;  // 0: cannot run at all
  return c;
}

// The split of K for `tiles` clusters of S blocks, by a time model: a block's time is its k steps (a
// 256-row block's counting twice), one more for its start, and with S > 1 its share of the cluster's sum (the
// (S - 1) / S of its NP x BW fp32 tile it reads from the other blocks, at half the rate it streams a step's
// bytes: a guess for distributed shared memory, for the bench's sweep to check), at a per-block rate that
// stays the same up to kSaturatingBlocks streaming blocks and falls beyond them (the memory's bandwidth is
// shared); clusters beyond those resident at once (cap[S]: a cluster must fit in one GPC, so on the H200 only
// 15 of 8 blocks are) run in further waves. Ties go to fewer waves, then fewer slices. Returns the time.
constexpr int64_t kSaturatingBlocks = 96;
int64_t choose_split(Plan& p, int64_t KT, const Capacity& cap, int max_splits) {
  const int64_t mb = p.block_cols / 128, np = p.rows_padded;
  const int64_t step_bytes = (p.block_cols + np) * 128, sum_bytes = np * p.block_cols * 4;
  int64_t best = -1, best_waves = 0;
  for (int s = 1; s <= std::min<int64_t>(max_splits, KT); ++s) {
    const int64_t k = (KT + s - 1) / s, eff = (KT + k - 1) / k;
    if (eff != s || cap[eff] <= 0) continue;  // the same split as a smaller s
    const int64_t waves = (p.tiles + cap[eff] - 1) / cap[eff];
    const int64_t active = std::min<int64_t>(p.tiles, cap[eff]) * eff;
    // In half steps of a 128-row block.
    // + eff: the cluster's barriers and its rank-order sum cost about half a step per block of the cluster
    // (measured: the shared expert's 2048 x 512 down product at 8 rows took 6.6 us in 8 slices, 3.9 in 4).
    const int64_t block = 2 * k * mb + 2 + (eff > 1 ? eff + sum_bytes * (eff - 1) / eff * 2 * mb / step_bytes : 0);
    const int64_t time = waves * block * std::max(kSaturatingBlocks, active);
    if (best < 0 || time < best || (time == best && waves < best_waves)) {
      best = time;
      best_waves = waves;
      p.k_steps = int(k);
      p.splits = int(eff);
    }
  }
  return best;
}

// Blocks of 256 weight rows read the rows' boxes half as often as blocks of 128: they are taken unless the
// model has blocks of 128 finish sooner. cols / max_splits: a forced block width (0: chosen) and a lower cap
// on the split, for the bench's sweep.
Plan plan_for(int np, const int64_t* Ns, int n, int64_t KT, const Capacity& cap, int cols, int max_splits) {
  int64_t time[3] = {0, 0, 0};
  auto make = [&](int mb) {
    Plan p;
    p.rows_padded = np;
    p.block_cols = 128 * mb;
    p.tiles = int(std::min<int64_t>(tiles_of(Ns, n, p.block_cols), int64_t{1} << 30));
    time[mb] = choose_split(p, KT, cap, max_splits);
    return p;
  };
  if (cols == 128 || np > 160) return make(1);
  if (cols == 256) return make(2);
  const Plan one = make(1), two = make(2);
  return time[2] <= time[1] ? two : one;
}

int sm_count() { return detail::device_sm_count(); }

struct FormHash {
  size_t operator()(const std::pair<const void*, int>& k) const {
    return std::hash<const void*>()(k.first) * 31u + std::hash<int>()(k.second);
  }
};

// Once per form and device: the kernel's shared-memory attribute set (host time on every product otherwise),
// then how many clusters of each size it really keeps resident, which the chosen plan's split is redone with.
template <class Kernel>
Capacity form_capacity(Kernel* kernel, uint32_t bytes) {
  static std::mutex mu;
  static std::unordered_map<std::pair<const void*, int>, Capacity, FormHash> caps;
  int dev = 0;
  HYPIC_CUDA_CHECK(cudaGetDevice(&dev));
  std::lock_guard<std::mutex> g(mu);
  auto it = caps.find({reinterpret_cast<const void*>(kernel), dev});
  if (it != caps.end()) return it->second;
  raise_smem_limit(kernel, bytes);
  Capacity cap = ideal_capacity(sm_count());
  for (int s = 1; s <= kMaxSplits; ++s) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(unsigned(s), 1);
    cfg.blockDim = dim3(kThreads);
    cfg.dynamicSmemBytes = bytes;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = unsigned(s);
    attr[0].val.clusterDim.y = 1;
    attr[0].val.clusterDim.z = 1;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    int clusters = 0;
    if (cudaOccupancyMaxActiveClusters(&clusters, reinterpret_cast<const void*>(kernel), &cfg) == cudaSuccess &&
        clusters > 0)
      cap[s] = clusters;
    else
      (void)cudaGetLastError();
  }
  caps.emplace(std::make_pair(reinterpret_cast<const void*>(kernel), dev), cap);
  return cap;
}

template <int NP, int MB>
void launch_form(const bf16* x, int64_t M, int64_t K, int64_t ldx, const GemmSkinnyTarget* t, int n,
                 const Plan& given, bool refine, cudaStream_t stream) {
  auto* kernel = skinny_sm90_kernel<NP, MB>;
  constexpr uint32_t bytes = SkinnySmem<NP, MB>::alloc;
  const Capacity cap = form_capacity(kernel, bytes);
  CUtensorMap w[kMaxTargets];
  SkinnyArgs a = {};
  int tile0 = 0;
  for (int i = 0; i < kMaxTargets; ++i) {
    const GemmSkinnyTarget& g = t[i < n ? i : 0];  // unused maps repeat the first
    w[i] = cached_map(g.w, K, g.N, K, uint32_t(128 * MB));
    if (i >= n) continue;
    const bool vec = g.N % 4 == 0 && g.ldy % 4 == 0 && reinterpret_cast<uintptr_t>(g.y) % 16 == 0;
    a.out[i] = {g.y, int(g.ldy), int(g.N), g.yt == DType::BF16 ? kStoreBf16 : g.accumulate ? kAddF32 : kStoreF32,
                tile0, vec ? 1 : 0};
    tile0 += int((g.N + 128 * MB - 1) / (128 * MB));
  }
  a.targets = n;
  a.M = int(M);
  a.KT = int((K + kBK - 1) / kBK);
  const CUtensorMap xmap = cached_map(x, K, M, ldx, uint32_t(NP));
  Plan p = given;
  if (refine) choose_split(p, a.KT, cap, kMaxSplits);  // the chosen width's split, with the real residency
  a.kt_per = p.k_steps;
  a.early = detail::pdl_trigger_early(int64_t(p.splits) * p.tiles) ? 1 : 0;
  detail::launch_pdl_clusters(detail::pdl_chain_enabled(), unsigned(p.splits), kernel,
                              dim3(unsigned(p.splits), unsigned(p.tiles)), dim3(kThreads), bytes, stream, w[0], w[1],
                              w[2], xmap, a);
}

template <int NP>
void launch_np(const bf16* x, int64_t M, int64_t K, int64_t ldx, const GemmSkinnyTarget* t, int n, const Plan& p,
               bool refine, cudaStream_t stream) {
  if constexpr (NP <= 160) {
    if (p.block_cols == 256) return launch_form<NP, 2>(x, M, K, ldx, t, n, p, refine, stream);
  }
  launch_form<NP, 1>(x, M, K, ldx, t, n, p, refine, stream);
}

bool target_fits(int64_t M, const GemmSkinnyTarget& t) {
  const size_t esize = t.yt == DType::BF16 ? 2 : 4;
  if (!t.w || !t.y || t.N < 1 || t.ldy < t.N) return false;
  if (reinterpret_cast<uintptr_t>(t.w) % 16 != 0 || reinterpret_cast<uintptr_t>(t.y) % esize != 0) return false;
  if (!(t.yt == DType::F32 || (t.yt == DType::BF16 && !t.accumulate))) return false;
  return t.N < (int64_t{1} << 30) && M * t.ldy < (int64_t{1} << 31);
}

}  // namespace

GemmSkinnyPlan gemm_skinny_plan_many(int64_t M, const int64_t* Ns, int n, int64_t K, int sms, int block_cols,
                                     int max_splits) {
  HYPIC_CUDA_REQUIRE(M >= 1 && M <= 256 && n >= 1 && n <= kMaxTargets && K >= 1 && sms >= 1,
                     "gemm_skinny_plan: bad shape");
  for (int i = 0; i < n; ++i) HYPIC_CUDA_REQUIRE(Ns[i] >= 1, "gemm_skinny_plan: a target without columns");
  HYPIC_CUDA_REQUIRE(block_cols == 0 || block_cols == 128 || block_cols == 256, "gemm_skinny_plan: block_cols");
  HYPIC_CUDA_REQUIRE(max_splits >= 1 && max_splits <= kMaxSplits, "gemm_skinny_plan: max_splits must be 1..8");
  return plan_for(padded_rows(M), Ns, n, (K + kBK - 1) / kBK, ideal_capacity(sms), block_cols, max_splits);
}

GemmSkinnyPlan gemm_skinny_plan(int64_t M, int64_t N, int64_t K, int sms, int block_cols, int max_splits) {
  return gemm_skinny_plan_many(M, &N, 1, K, sms, block_cols, max_splits);
}

bool gemm_skinny_enabled() { return !env_is("HYPIC_CUDA_SKINNY", "0"); }

bool gemm_skinny_applies_many(const bf16* x, int64_t M, int64_t K, int64_t ldx, const GemmSkinnyTarget* t, int n) {
  if (M < 1 || M > 256 || K < 8 || K % 8 != 0 || ldx % 8 != 0 || ldx < K || n < 1 || n > kMaxTargets) return false;
  if (reinterpret_cast<uintptr_t>(x) % 16 != 0 || K >= (int64_t{1} << 31)) return false;
  for (int i = 0; i < n; ++i)
    if (!target_fits(M, t[i])) return false;
  return current_device_is_sm90();
}

bool gemm_skinny_applies(const bf16* x, int64_t M, int64_t K, int64_t ldx, const bf16* w, int64_t N, const void* y,
                         DType yt, int64_t ldy, bool accumulate) {
  const GemmSkinnyTarget t{w, N, const_cast<void*>(y), yt, ldy, accumulate};
  return gemm_skinny_applies_many(x, M, K, ldx, &t, 1);
}

void gemm_skinny_many(const bf16* x, int64_t M, int64_t K, int64_t ldx, const GemmSkinnyTarget* t, int n,
                      cudaStream_t stream, const GemmSkinnyPlan* plan) {
  HYPIC_CUDA_REQUIRE(gemm_skinny_applies_many(x, M, K, ldx, t, n),
                     "gemm_skinny: shape, alignment or device not supported");
  int64_t Ns[kMaxTargets];
  for (int i = 0; i < n; ++i) Ns[i] = t[i].N;
  const Plan p = plan ? *plan : gemm_skinny_plan_many(M, Ns, n, K, sm_count());
  const int np = p.rows_padded;
  const int64_t kt = (K + kBK - 1) / kBK;
  HYPIC_CUDA_REQUIRE(np == padded_rows(M) && (p.block_cols == 128 || (p.block_cols == 256 && np <= 160)) &&
                         p.tiles == tiles_of(Ns, n, p.block_cols) && p.splits >= 1 && p.splits <= kMaxSplits &&
                         p.k_steps >= 1 && int64_t(p.splits) * p.k_steps >= kt &&
                         int64_t(p.splits - 1) * p.k_steps < kt,
                     "gemm_skinny: the plan does not fit the problem (make it with gemm_skinny_plan)");
  HYPIC_CUDA_REQUIRE(p.tiles < 65536, "gemm_skinny: too many output columns");
  switch (np) {
    case 16: launch_np<16>(x, M, K, ldx, t, n, p, plan == nullptr, stream); break;
    case 32: launch_np<32>(x, M, K, ldx, t, n, p, plan == nullptr, stream); break;
    case 64: launch_np<64>(x, M, K, ldx, t, n, p, plan == nullptr, stream); break;
    case 96: launch_np<96>(x, M, K, ldx, t, n, p, plan == nullptr, stream); break;
    case 128: launch_np<128>(x, M, K, ldx, t, n, p, plan == nullptr, stream); break;
    case 160: launch_np<160>(x, M, K, ldx, t, n, p, plan == nullptr, stream); break;
    case 192: launch_np<192>(x, M, K, ldx, t, n, p, plan == nullptr, stream); break;
    default: launch_np<256>(x, M, K, ldx, t, n, p, plan == nullptr, stream); break;
  }
  HYPIC_CUDA_LAUNCH_CHECK();
}

void gemm_skinny(const bf16* x, int64_t M, int64_t K, int64_t ldx, const bf16* w, int64_t N, void* y, DType yt,
                 int64_t ldy, bool accumulate, cudaStream_t stream, const GemmSkinnyPlan* plan) {
  const GemmSkinnyTarget t{w, N, y, yt, ldy, accumulate};
  gemm_skinny_many(x, M, K, ldx, &t, 1, stream, plan);
}

}  // namespace hypic::cuda
