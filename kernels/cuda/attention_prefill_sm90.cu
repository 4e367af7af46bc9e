// Hopper-native attention prefill for head dim 256 (Qwen3-Next / Qwen3.5 attention layers): bulk tensor
// copies (TMA) into 128-byte-swizzled shared memory, wgmma from shared memory, one producer warpgroup and
// two consumer warpgroups (FA3's division of work; written from the PTX manual, no code taken).
//
// Block = 128 query rows of one query head, 384 threads:
//   warpgroup 0 (producer, 40 registers a thread, 24 with 80-key tiles): classifies the key tiles by position
//     (all four warps the first 8 tiles, then warps 1-3 the next chunk of up to 256 while thread 0 streams the
//     current one's kept tiles' K and V through two shared-memory stages, each stage's K and V on their own
//     mbarrier so that Q K^T starts before V lands);
//   warpgroups 1 and 2 (consumers, 232 registers, 240 with 80-key tiles): 64 query rows each; per tile S = Q K^T
//     (16 wgmma m64nKk16, both operands in shared memory), the online softmax on the accumulators, then
//     O += P V (wgmma m64n256k16, P straight from registers, V transposed by the descriptor), that product left in
//     flight under the next tile's softmax.
// Tiles of 64 keys for the whole prefill, 80 for the split form (the faster on each on the H200; two stages of K
// and V still fill shared memory next to the Q tile), either with HYPIC_CUDA_ATTN_SM90_KEYS=64|80.
// Blocks run in sections of whole kv heads' query heads where all kv heads' K and V would not stay in L2.
// Positions are arbitrary (keys from several cached segments plus fresh rows): a tile is skipped when every key
// lies after the block's last query, not computed by a warpgroup whose queries all precede it, and masked per
// element only when its positions straddle the warpgroup's queries (on a causal prefill: the diagonal tiles and
// a partial last tile).
// Split form: as attention_prefill_split, a key-tile range per block and unnormalised partial rows out.
#include <climits>
#include <cstdlib>
#include <cstring>

#include "kernels/cuda/attention.h"
#include "kernels/cuda/attention_prefill_sm90.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/env_switch.h"
#include "kernels/cuda/mma.cuh"
#include "kernels/cuda/pdl_launch.cuh"
#include "kernels/cuda/sm90.cuh"
#include "kernels/cuda/sm90_host.h"
#include "kernels/cuda/smem_limit.h"

namespace hypic::cuda {
namespace {

constexpr int kD = 256, kBM = 128, kStages = 2, kThreads = 384;
constexpr uint32_t kQBox = 64 * 128;  // bytes of one Q box: 64 rows x 64 columns
// Registers a thread of the producer and of the consumers: 40 and 232 with 64-key tiles; with 80-key tiles the
// consumers need 240 (below that ptxas serialises every wgmma, C7512), which leaves the producer 24 (it spills).
template <int KEYS>
constexpr int kProducerRegs = KEYS == 80 ? 24 : 40;
template <int KEYS>
constexpr int kConsumerRegs = KEYS == 80 ? 240 : 232;
// setmaxnreg moves registers within the block's launch allocation (168 a thread: 64K / 384 rounded down to 8); a
// larger sum would leave the consumers' setmaxnreg.inc waiting for registers that never come free.
static_assert(128 * kProducerRegs<64> + 256 * kConsumerRegs<64> <= 384 * 168, "register split exceeds the allocation");
static_assert(128 * kProducerRegs<80> + 256 * kConsumerRegs<80> <= 384 * 168, "register split exceeds the allocation");

// A key tile's class, one byte per tile: kept at all (some key at or before the block's last query), and for
// each consumer warpgroup w whether every key comes after its queries (hidden) or some do (mixed: masked).
constexpr uint32_t kKeep = 1;
__host__ __device__ constexpr uint32_t hidden_bit(int wg) { return 2u << (2 * wg); }
__host__ __device__ constexpr uint32_t mixed_bit(int wg) { return 4u << (2 * wg); }

struct StageMeta {
  int64_t tile;
  uint32_t cls, pad;
};

// Offsets from the 1024-aligned base of dynamic shared memory.
template <int KEYS>
struct Layout {
  static constexpr uint32_t kv_box = KEYS * 128;                // one K or V box: KEYS keys x 64 columns
  static constexpr uint32_t tile_bytes = 4 * kv_box;            // one K (or V) tile
  static constexpr int chunk = 256;                             // key tiles classified per scan
  static constexpr uint32_t q = 0;                              // [wg 2][chunk 4] boxes of 64 rows x 64 dims
  static constexpr uint32_t kv = q + 2 * 4 * kQBox;             // [stage][K 4 boxes, V 4 boxes]
  static constexpr uint32_t meta = kv + kStages * 2 * tile_bytes;
  static constexpr uint32_t bars = meta + kStages * sizeof(StageMeta);  // q_full, full_k/v[2], empty_k/v[2]
  static constexpr uint32_t qrange = bars + 16 * 8;             // int64 qmin[4], qmax[4] (32 rows each)
  static constexpr uint32_t cls = qrange + 8 * 8;               // [2][chunk] class bytes, one per tile
  static constexpr uint32_t bytes = cls + 2 * chunk;
  static constexpr uint32_t alloc = bytes + 1024;               // slack to align the base
  static_assert(alloc <= 227 * 1024, "fits one H100/H200 block");
  static_assert(kv_box % 1024 == 0, "swizzle atoms stay 1024-aligned");
};

// S[64 x KEYS] (+)= Q K^T for one 16-dimension slice.
template <int KEYS>
__device__ __forceinline__ void wgmma_scores(float (&d)[KEYS / 2], uint64_t desc_q, uint64_t desc_k, int accumulate) {
  if constexpr (KEYS == 64)
    sm90::wgmma_m64n64k16_ss(d, desc_q, desc_k, accumulate);
  else
    sm90::wgmma_m64n80k16_ss(d, desc_q, desc_k, accumulate);
}


using detail::ex2;
using detail::warp_max_i64;
using detail::warp_min_i64;

// Consumer schedules (compared on the H200, docs/benchmarks.md): kPlain: S, softmax, P V in turn per tile;
// kOverlap: the softmax of tile i runs while P_{i-1} V_{i-1} is on the tensor cores; kPingPong: kOverlap, and
// the two consumer warpgroups take turns issuing their products (named barriers), so that one's softmax
// runs under the other's products.
enum Schedule { kPlain = 0, kOverlap = 1, kPingPong = 2 };

// CLUSTER: blocks in clusters of two, query heads 2j and 2j + 1 of one kv head over the same query rows and
// key tiles; each block loads half of every K and V tile and multicasts it to both, so the pair reads each
// tile from L2 once (the eight query heads of a kv head otherwise read every tile eight times).
// STAGED (the unsplit form's default): each consumer warp writes its 16 output rows into shared memory (the
// warpgroup's Q tile, no longer read) and stores them back as whole 512-byte rows, 16 bytes a lane, instead of
// 4-byte stores that each touch 8 rows (HYPIC_CUDA_ATTN_SM90_STAGED=0 keeps those; the same bits).
template <bool SPLIT, int SCHED, bool CLUSTER, bool STAGED, int KEYS>
__global__ void __launch_bounds__(kThreads, 1)
    attention_sm90_kernel(const __grid_constant__ CUtensorMap tq, const __grid_constant__ CUtensorMap tk,
                          const __grid_constant__ CUtensorMap tv, AttentionShape s, const int64_t* __restrict__ q_pos,
                          const int64_t* __restrict__ k_pos, float scale_log2, float slack, bf16* __restrict__ out,
                          int64_t splits_arg, float* __restrict__ part_o, float* __restrict__ part_ml,
                          int section_heads) {
#if HYPIC_SM90A
  using namespace sm90;
  detail::pdl_wait();  // programmatic launch: the queries and keys are the kernels before's
  static_assert(KEYS == 64 || KEYS == 80, "key tiles of 64 or 80");
  constexpr int kKeys = KEYS;
  using L = Layout<KEYS>;
  constexpr uint32_t kTileBytes = L::tile_bytes, kBox = L::kv_box;
  constexpr int kChunk = L::chunk, kFirstChunk = 8;
  extern __shared__ unsigned char smem_raw[];
  // Aligned by an offset from the __shared__ array (not through an integer cast) so that the compiler still knows
  // the address space: the stage metadata, barriers and staged output take shared loads and stores, not generic ones.
  unsigned char* smem = smem_raw + ((1024u - (smem_u32(smem_raw) & 1023u)) & 1023u);
  StageMeta* meta = reinterpret_cast<StageMeta*>(smem + L::meta);
  uint64_t* bars = reinterpret_cast<uint64_t*>(smem + L::bars);
  uint64_t* q_full = bars;
  uint64_t* full_k = bars + 1;
  uint64_t* full_v = bars + 1 + kStages;
  uint64_t* empty_k = bars + 1 + 2 * kStages;
  uint64_t* empty_v = bars + 1 + 3 * kStages;
  int64_t* qmin = reinterpret_cast<int64_t*>(smem + L::qrange);
  int64_t* qmax = qmin + 4;

  const int tid = int(threadIdx.x), warp = tid / 32, lane = tid % 32;
  const int64_t splits = SPLIT ? splits_arg : 1;
  // Launch order: latest query tile first (the most keys); the query heads of one kv head side by side.
  const int64_t n_mt = (s.Tq + kBM - 1) / kBM;
  const uint32_t crank = CLUSTER ? cluster_ctarank() : 0;
  int64_t split, h, m0;
  if constexpr (CLUSTER) {  // block = ((pair * splits + split) * 2 + rank); a pair = (query tile, two heads)
    const int64_t pair = int64_t(blockIdx.x) / 2, hp = s.Hq / 2;
    split = pair % splits;
    const int64_t bid = pair / splits;
    h = 2 * (bid % hp) + crank;
    m0 = (n_mt - 1 - bid / hp) * kBM;
  } else {
    // Heads in sections of section_heads (whole kv heads' groups): a section's blocks all run before the next
    // section's, so the blocks resident at once read the K and V of few kv heads (a working set that stays in
    // L2 on a long prefill; section_heads = Hq is the plain order).
    split = int64_t(blockIdx.x) % splits;
    const int64_t bid = int64_t(blockIdx.x) / splits, per_section = n_mt * section_heads;
    const int64_t sec = bid / per_section, r = bid - sec * per_section;
    const int64_t in_sec = s.Hq - sec * section_heads < section_heads ? s.Hq - sec * section_heads : section_heads;
    h = sec * section_heads + r % in_sec;
    m0 = (n_mt - 1 - r / in_sec) * kBM;
  }
  const int64_t kh = h / (s.Hq / s.Hkv);
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
      mbar_init(empty_k + i, CLUSTER ? 16 : 8);  // lane 0 of each consumer warp (of both blocks of a pair)
      mbar_init(empty_v + i, CLUSTER ? 16 : 8);
    }
    mbar_fence_init();
  }
  if constexpr (CLUSTER)
    cluster_sync();  // the peer's copies may arrive on these barriers as soon as it starts
  else
    __syncthreads();
  // K or V tile `tile` into `dst`, completing on `bar`: all four boxes, or this block's two of a pair's.
  auto load_tile = [&](unsigned char* dst, const CUtensorMap* map, int tile, uint64_t* bar) {
    if constexpr (CLUSTER) {
      for (int c = 2 * int(crank); c < 2 * int(crank) + 2; ++c)
        tma_load_2d_multicast(dst + c * kBox, map, int(kh * kD + c * 64), tile * kKeys, bar, 0x3);
    } else {
      for (int c = 0; c < 4; ++c) tma_load_2d(dst + c * kBox, map, int(kh * kD + c * 64), tile * kKeys, bar);
    }
  };
  // A consumer warp's release of a stage: to both blocks of a pair (either block's next copy lands in both).
  auto release = [&](uint64_t* bar) {
    __syncwarp();
    if (elect_one()) {
      mbar_arrive(bar);
      if constexpr (CLUSTER) mbar_arrive_cluster(bar, crank ^ 1);
    }
  };

  const int64_t n_tiles = (s.Tk + kKeys - 1) / kKeys;
  int64_t t_lo = 0, t_hi = n_tiles;
  if constexpr (SPLIT) {
    const int64_t per_split = (n_tiles + splits - 1) / splits;
    t_lo = split * per_split < n_tiles ? split * per_split : n_tiles;
    t_hi = t_lo + per_split < n_tiles ? t_lo + per_split : n_tiles;
  }

  if (warp < 4) {
    // ---------------- producer ----------------
    setmaxnreg_dec<kProducerRegs<KEYS>>();
    uint8_t* cls_s = smem + L::cls;
    if (tid == 0) {
      prefetch_tensor_map(&tq);
      prefetch_tensor_map(&tk);
      prefetch_tensor_map(&tv);
      mbar_arrive_expect_tx(q_full, 2 * 4 * kQBox);
      for (int w = 0; w < 2; ++w)
        for (int c = 0; c < 4; ++c)
          tma_load_2d(smem + L::q + (w * 4 + c) * kQBox, &tq, int(h * kD + c * 64), int(m0 + w * 64), q_full);
    }
    // Issue order K_0, K_1, V_0, K_2, V_1, ...: a consumer needs K_{i+1} and V_i at the same time (it
    // multiplies P_i V_i while the scores of tile i + 1 are being formed), and K's stage frees first.
    int stage = 0, v_stage = -1;
    uint32_t phase = 0, v_phase = 0;
    int v_tile = -1;  // tile indices fit an int (TMA coordinates are int32); the producer is short of registers
    auto issue_v = [&] {
      mbar_wait(empty_v + v_stage, v_phase ^ 1);
      unsigned char* vst = smem + L::kv + v_stage * 2 * kTileBytes + kTileBytes;
      mbar_arrive_expect_tx(full_v + v_stage, kTileBytes);
      load_tile(vst, &tv, v_tile, full_v + v_stage);
    };
    // Chunk c's tiles: the first chunk is short so that the first copies start after one classification round;
    // while thread 0 issues chunk c from one class buffer, warps 1-3 classify chunk c + 1 into the other.
    const int tlo = int(t_lo), thi = int(t_hi);
    auto chunk_lo = [&](int c) {
      const int b = c == 0 ? tlo : tlo + kFirstChunk + (c - 1) * kChunk;
      return b < thi ? b : thi;
    };
    auto chunk_hi = [&](int c) {
      const int e = tlo + kFirstChunk + c * kChunk;
      return e < thi ? e : thi;
    };
    // Warps [w0, 4) classify tiles [c0, c1) into cls (the query ranges read from shared memory by the lane that
    // writes the class: registers are scarce here).
    auto classify = [&](int c0, int c1, uint8_t* cls, int w0) {
      const int nc = c1 - c0;
#pragma unroll 2
      for (int lt = warp - w0; lt < nc; lt += 4 - w0) {
        int64_t lo = LLONG_MAX, hi = LLONG_MIN;
#pragma unroll
        for (int r = 0; r < kKeys; r += 32) {
          const int64_t j = int64_t(c0 + lt) * kKeys + r + lane;
          if (r + lane < kKeys) {  // a key past the end counts as never visible (the tile is then masked)
            const int64_t x = j < s.Tk ? k_pos[j] : LLONG_MAX;
            hi = x > hi ? x : hi;
            lo = x < lo ? x : lo;
          }
        }
        const int64_t mn = warp_min_i64(lo), mx = warp_max_i64(hi);
        if (lane == 0) {
          uint32_t c = 0;
#pragma unroll
          for (int w = 0; w < 2; ++w) {
            const int64_t wmin = qmin[2 * w] < qmin[2 * w + 1] ? qmin[2 * w] : qmin[2 * w + 1];
            const int64_t wmax = qmax[2 * w] > qmax[2 * w + 1] ? qmax[2 * w] : qmax[2 * w + 1];
            if (mn <= wmax) c |= kKeep;  // kept where some warpgroup sees a key of it
            if (mn > wmax)
              c |= hidden_bit(w);
            else if (mx > wmin)
              c |= mixed_bit(w);
          }
          cls[lt] = uint8_t(c);
        }
      }
    };
    classify(chunk_lo(0), chunk_hi(0), cls_s, 0);
    named_barrier(1, 128);
    for (int c = 0; chunk_lo(c) < thi; ++c) {
      const int c0 = chunk_lo(c), nc = chunk_hi(c) - c0;
      if (warp > 0) {
        classify(chunk_lo(c + 1), chunk_hi(c + 1), cls_s + ((c + 1) & 1) * kChunk, 1);
      } else if (tid == 0) {
        const uint8_t* cls = cls_s + (c & 1) * kChunk;
        for (int lt = 0; lt < nc; ++lt) {
          const uint32_t cl = cls[lt];
          if (!(cl & kKeep)) continue;
          const int tile = c0 + lt;
          mbar_wait(empty_k + stage, phase ^ 1);
          meta[stage] = StageMeta{tile, cl, 0};
          unsigned char* kst = smem + L::kv + stage * 2 * kTileBytes;
          mbar_arrive_expect_tx(full_k + stage, kTileBytes);
          load_tile(kst, &tk, tile, full_k + stage);
          if (SCHED == kPlain) {
            v_tile = tile;
            v_stage = stage;
            v_phase = phase;
            issue_v();
            v_tile = -1;
          } else {
            if (v_tile >= 0) issue_v();
            v_tile = tile;
            v_stage = stage;
            v_phase = phase;
          }
          if (++stage == kStages) {
            stage = 0;
            phase ^= 1;
          }
        }
      }
      __syncwarp();
      named_barrier(1, 128);  // chunk c + 1 classified, chunk c's buffer no longer read
    }
    if (tid == 0) {  // the last V, then the end of the stream
      if (v_tile >= 0) issue_v();
      mbar_wait(empty_k + stage, phase ^ 1);
      meta[stage].tile = -1;
      mbar_arrive(full_k + stage);
    }
  } else {
  // ---------------- consumers ----------------
  setmaxnreg_inc<kConsumerRegs<KEYS>>();
  // wg through a shuffle from lane 0: the compiler then knows it is warp-uniform (descriptors in uniform registers).
  const int wg = __shfl_sync(0xffffffffu, warp / 4 - 1, 0), wt = tid % 128, ww = wt / 32, g = lane >> 2, t = lane & 3;
  const int r_lo = wg * 64 + ww * 16 + g, r_hi = r_lo + 8;  // block rows of this thread
  const unsigned char* q_wg = smem + L::q + wg * 4 * kQBox;
  const uint64_t desc_q = desc_sw128(q_wg, 16, 1024);

  float o[128];
#pragma unroll
  for (int i = 0; i < 128; ++i) o[i] = 0.0f;
  float m_lo = -INFINITY, m_hi = -INFINITY, l_lo = 0.0f, l_hi = 0.0f;

  // Software pipeline across tiles: the scores of tile i are formed and exponentiated while the tensor cores run
  // P_{i-1} V_{i-1}. Tile i's probabilities stay in sc, unpacked, until the next tile's step: that step first waits
  // for P_{i-1} V_{i-1}, rescales O, packs P_i into pa and then issues S_{i+1} with P_i V_i behind it. The wait
  // for the product in flight thus sits after a loop back-edge and the next stage's barrier: in one basic block
  // with the softmax, ptxas scheduled it ahead of the exponentials (so the softmax never ran under the product).
  float sc[kKeys / 2];        // S of the current tile, then its probabilities (fp32) until packed
  uint32_t pa[kKeys / 16][4]; // P of the product in flight or about to issue (bf16 pairs, the A layout of P V)
  int p_stage = -1;           // stage of the tile whose P waits in sc (-1: none)
  uint32_t p_phase = 0;
  int f_stage = -1;           // stage of the P V product in flight (-1: none); only while p_stage >= 0
  float pal_lo = 1.0f, pal_hi = 1.0f;  // the pending tile's rescale of O, applied before its product
  // Ping-pong turns: warpgroup w waits on barrier 2 + w before issuing products and then opens the other's.
  constexpr bool kTurns = SCHED == kPingPong;
  auto turn_begin = [&] {
    if (kTurns) named_barrier(2 + wg, 256);
  };
  auto turn_end = [&] {
    if (kTurns) asm volatile("barrier.arrive %0, %1;\n" ::"r"(2 + (wg ^ 1)), "r"(256) : "memory");
  };
  if (kTurns && wg == 1) asm volatile("barrier.arrive %0, %1;\n" ::"r"(2), "r"(256) : "memory");  // warpgroup 0 first
  // The product in flight has landed (waited for by the caller): its V stage is free; O takes the pending tile's
  // rescale and the pending P is packed into pa (whose registers that product no longer reads).
  auto retire_and_pack = [&] {
    fence_regs(o);
    fence_u32(pa);
    if (f_stage >= 0) release(empty_v + f_stage);
    f_stage = -1;
    if (__any_sync(0xffffffffu, pal_lo != 1.0f || pal_hi != 1.0f)) {
#pragma unroll
      for (int j = 0; j < 32; ++j) {
        o[4 * j] *= pal_lo;
        o[4 * j + 1] *= pal_lo;
        o[4 * j + 2] *= pal_hi;
        o[4 * j + 3] *= pal_hi;
      }
    }
#pragma unroll
    for (int j = 0; j < kKeys / 8; ++j) {
      pa[j / 2][(j % 2) * 2 + 0] = detail::pack_bf16(sc[4 * j], sc[4 * j + 1]);
      pa[j / 2][(j % 2) * 2 + 1] = detail::pack_bf16(sc[4 * j + 2], sc[4 * j + 3]);
    }
  };
  // The pending tile's P V on its own (the product before it retired first: the caller has waited for it), its V
  // stage released.
  auto flush = [&] {
    if (p_stage < 0) return;
    retire_and_pack();
    mbar_wait(full_v + p_stage, p_phase);
    const uint64_t desc_v = desc_sw128(smem + L::kv + p_stage * 2 * kTileBytes + kTileBytes, kBox, 1024);
    fence_regs(o);
    fence_u32(pa);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kKeys / 16; ++kk) wgmma_m64n256k16_rs(o, pa[kk], desc_advance(desc_v, kk * 16 * 128));
    wgmma_commit();
    wgmma_wait<0>();
    fence_regs(o);
    fence_u32(pa);
    release(empty_v + p_stage);
    p_stage = -1;
  };
  mbar_wait(q_full, 0);
  int stage = 0;
  uint32_t phase = 0;
  for (;;) {
    mbar_wait(full_k + stage, phase);
    // The product in flight (a no-op where there is none), on every path (the waits stay off branches: see the
    // traps in docs/cuda_kernels.md).
    wgmma_wait<0>();
    const StageMeta mt = meta[stage];
    if (mt.tile < 0) break;
    const bool hidden = (mt.cls & hidden_bit(wg)) != 0, mixed = (mt.cls & mixed_bit(wg)) != 0;
    if (hidden) {
      // A pending tile is not held across a tile this warpgroup skips: the producer's next V may need its stage
      // before this warpgroup computes another tile.
      turn_begin();
      flush();
      turn_end();
      release(empty_k + stage);
      // Every release of a V stage follows the wait for that V: the K stage refills ahead of V, so an early
      // arrival could complete the phase of the V before it.
      mbar_wait(full_v + stage, phase);
      release(empty_v + stage);
    } else {
      const uint64_t desc_k = desc_sw128(smem + L::kv + stage * 2 * kTileBytes, 16, 1024);
      // S = Q K^T, and the pending tile's P V behind it. Each path is one fence-issue-commit block: a wgmma issued
      // under a branch after others were issued outside it makes ptxas serialise them all.
      auto issue_s = [&] {
#pragma unroll
        for (int ks = 0; ks < kD / 16; ++ks) {
          const uint32_t in = (ks % 4) * 32;  // the 16-column slice inside a 128-byte swizzled row
          wgmma_scores<KEYS>(sc, desc_advance(desc_q, (ks / 4) * kQBox + in),
                             desc_advance(desc_k, (ks / 4) * kBox + in), ks > 0);
        }
        wgmma_commit();
      };
      if (p_stage >= 0) {
        retire_and_pack();
        mbar_wait(full_v + p_stage, p_phase);
        const uint64_t desc_v = desc_sw128(smem + L::kv + p_stage * 2 * kTileBytes + kTileBytes, kBox, 1024);
        turn_begin();
        fence_regs(o);
        fence_regs(sc);
        fence_u32(pa);
        wgmma_fence();
        issue_s();
#pragma unroll
        for (int kk = 0; kk < kKeys / 16; ++kk) wgmma_m64n256k16_rs(o, pa[kk], desc_advance(desc_v, kk * 16 * 128));
        wgmma_commit();
        turn_end();
        f_stage = p_stage;
        wgmma_wait<1>();
      } else {
        turn_begin();
        fence_regs(o);
        fence_regs(sc);
        wgmma_fence();
        issue_s();
        turn_end();
        wgmma_wait<0>();
      }
      fence_regs(sc);
      release(empty_k + stage);

      // Raw scores; masked ones to -inf where the tile straddles this warpgroup's queries.
      if (mixed) {
        // The rows' positions read here (L1 hits after the first mixed tile) rather than held: registers are short.
        const int64_t qp_lo = r_lo < rows ? __ldg(q_pos + m0 + r_lo) : LLONG_MIN;
        const int64_t qp_hi = r_hi < rows ? __ldg(q_pos + m0 + r_hi) : LLONG_MIN;
#pragma unroll
        for (int j = 0; j < kKeys / 8; ++j) {
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int64_t key = mt.tile * kKeys + j * 8 + 2 * t + e;
            const int64_t kp = key < s.Tk ? __ldg(k_pos + key) : LLONG_MAX;
            if (kp > qp_lo) sc[4 * j + e] = -INFINITY;
            if (kp > qp_hi) sc[4 * j + 2 + e] = -INFINITY;
          }
        }
      }
      float tmax_lo = -INFINITY, tmax_hi = -INFINITY;
#pragma unroll
      for (int j = 0; j < kKeys / 8; ++j) {
        tmax_lo = fmaxf(tmax_lo, fmaxf(sc[4 * j], sc[4 * j + 1]));
        tmax_hi = fmaxf(tmax_hi, fmaxf(sc[4 * j + 2], sc[4 * j + 3]));
      }
#pragma unroll
      for (int off = 1; off < 4; off <<= 1) {
        tmax_lo = fmaxf(tmax_lo, __shfl_xor_sync(0xffffffffu, tmax_lo, off));
        tmax_hi = fmaxf(tmax_hi, __shfl_xor_sync(0xffffffffu, tmax_hi, off));
      }
      // Reference maxima in log2 units (scale > 0, so the max of the scaled scores is the scaled max). A row's
      // reference moves only when the tile's max exceeds it by more than `slack`: the exponentials then stay below
      // 2^slack (exact enough in fp32 sums and bf16 P), and O is rescaled only on the tiles where a reference moved,
      // not on every tile where some row's max grew a little (slack 0: the running max itself).
      const float tm_lo = tmax_lo * scale_log2, tm_hi = tmax_hi * scale_log2;
      const float mn_lo = tm_lo > m_lo + slack ? tm_lo : m_lo, mn_hi = tm_hi > m_hi + slack ? tm_hi : m_hi;
      // A row that has seen no key yet keeps reference 0 so that exp2(-inf - ref) = 0, never NaN.
      const float ref_lo = mn_lo == -INFINITY ? 0.0f : mn_lo, ref_hi = mn_hi == -INFINITY ? 0.0f : mn_hi;
      pal_lo = ex2(m_lo - ref_lo);
      pal_hi = ex2(m_hi - ref_hi);
      m_lo = mn_lo;
      m_hi = mn_hi;
      float sum_lo = 0.0f, sum_hi = 0.0f;
#pragma unroll
      for (int j = 0; j < kKeys / 8; ++j) {
        sc[4 * j] = ex2(fmaf(sc[4 * j], scale_log2, -ref_lo));
        sc[4 * j + 1] = ex2(fmaf(sc[4 * j + 1], scale_log2, -ref_lo));
        sc[4 * j + 2] = ex2(fmaf(sc[4 * j + 2], scale_log2, -ref_hi));
        sc[4 * j + 3] = ex2(fmaf(sc[4 * j + 3], scale_log2, -ref_hi));
        sum_lo += sc[4 * j] + sc[4 * j + 1];
        sum_hi += sc[4 * j + 2] + sc[4 * j + 3];
      }
      l_lo = l_lo * pal_lo + sum_lo;
      l_hi = l_hi * pal_hi + sum_hi;
      p_stage = stage;
      p_phase = phase;
      if (SCHED == kPlain) flush();
    }
    if (++stage == kStages) {
      stage = 0;
      phase ^= 1;
    }
  }
  // The last tile's P V (a turn of its own for both warpgroups, so that the turns pair up; warpgroup 1 opens
  // no further turn).
  if (kTurns) named_barrier(2 + wg, 256);
  flush();
  if (kTurns && wg == 0) asm volatile("barrier.arrive %0, %1;\n" ::"r"(3), "r"(256) : "memory");

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
  } else if constexpr (STAGED) {
  const float inv_lo = l_lo > 0.0f ? 1.0f / l_lo : 0.0f, inv_hi = l_hi > 0.0f ? 1.0f / l_hi : 0.0f;
  // The warp's 8 KB of its warpgroup's Q tile (which holds other warps' Q rows too: the whole warpgroup is
  // past its last product first). Row lr's 16-byte piece c at piece c ^ (lr & 7): conflict-free both ways.
  named_barrier(4 + wg, 128);
  unsigned char* stage_out = smem + L::q + wg * 4 * kQBox + ww * 8192;
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
    const float inv = hh ? inv_hi : inv_lo;
    unsigned char* put = stage_out + (g + 8 * hh) * 512 + 4 * t;
#pragma unroll
    for (int j = 0; j < 32; ++j)
      *reinterpret_cast<uint32_t*>(put + ((j ^ g) << 4)) =
          detail::pack_bf16(o[4 * j + 2 * hh] * inv, o[4 * j + 2 * hh + 1] * inv);
  }
  __syncwarp();
  const int row0 = wg * 64 + ww * 16;
#pragma unroll 4
  for (int i = 0; i < 16; ++i) {
    const uint4 v = *reinterpret_cast<const uint4*>(stage_out + i * 512 + ((lane ^ (i & 7)) << 4));
    if (row0 + i < rows) *reinterpret_cast<uint4*>(out + ((m0 + row0 + i) * s.Hq + h) * kD + 8 * lane) = v;
  }
  } else {
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
  }  // SPLIT
  }  // consumers
  // A block of a pair leaves only when its peer no longer arrives on its barriers nor copies into it.
  if constexpr (CLUSTER) cluster_sync();
#else
  // Built without the sm_90a target (plain sm_90): fail loudly rather than return nothing on a Hopper GPU.
  __trap();
#endif
}

// Read on every call (a getenv is cheap next to a launch) so that a bench can time both forms in one process.
bool env_enabled() { return !env_is("HYPIC_CUDA_ATTN_SM90", "0"); }

// HYPIC_CUDA_ATTN_SM90_SCHEDULE=0|1|2 picks the consumers' schedule (benches; default kOverlap).
int schedule() {
  const char* e = std::getenv("HYPIC_CUDA_ATTN_SM90_SCHEDULE");
  const int v = e ? std::atoi(e) : int(kOverlap);
  return v >= kPlain && v <= kPingPong ? v : int(kOverlap);
}

// HYPIC_CUDA_ATTN_SM90_SLACK=x: how far (log2 units) a tile's max may exceed a row's reference before the
// reference moves and O is rescaled (default 8; 0 tracks the running max exactly, the A/B form).
float rescale_slack() {
  const char* e = std::getenv("HYPIC_CUDA_ATTN_SM90_SLACK");
  const float v = e ? float(std::atof(e)) : 8.0f;
  return v >= 0.0f && v <= 16.0f ? v : 8.0f;
}

bool staged() { return !env_is("HYPIC_CUDA_ATTN_SM90_STAGED", "0"); }

// HYPIC_CUDA_ATTN_SM90_CLUSTER=1: blocks in pairs sharing K/V loads (needs an even number of query heads per kv head).
bool use_cluster(const AttentionShape& s) {
  return env_is("HYPIC_CUDA_ATTN_SM90_CLUSTER", "1") && (s.Hq / s.Hkv) % 2 == 0;
}

// The key tile's width: 64 for the whole-prefill form and 80 for the split form (the faster on each, measured on the
// H200: docs/benchmarks.md), or either with HYPIC_CUDA_ATTN_SM90_KEYS=64|80. 80 is built for the default schedule
// without block pairs only (the other schedules and the pairs are A/B forms of their own and keep 64).
int key_tile(const AttentionShape& s, bool split) {
  const bool want80 = std::getenv("HYPIC_CUDA_ATTN_SM90_KEYS") ? env_is("HYPIC_CUDA_ATTN_SM90_KEYS", "80") : split;
  return want80 && schedule() == kOverlap && !use_cluster(s) ? 80 : 64;
}

using KernelFn = void (*)(CUtensorMap, CUtensorMap, CUtensorMap, AttentionShape, const int64_t*, const int64_t*, float,
                          float, bf16*, int64_t, float*, float*, int);

// Query heads a section takes (the block order's outer grouping): whole groups of Hq / Hkv heads, as many kv heads
// as keep their K and V within ~60% of L2 (HYPIC_CUDA_ATTN_SM90_L2_MB overrides that budget; 0: one section).
int section_heads(const AttentionShape& s) {
  static const int64_t l2 = [] {
    int dev = 0, bytes = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&bytes, cudaDevAttrL2CacheSize, dev) != cudaSuccess)
      return int64_t{0};
    return int64_t(bytes);
  }();
  const char* e = std::getenv("HYPIC_CUDA_ATTN_SM90_L2_MB");
  const int64_t budget = e ? int64_t(std::atof(e) * 1048576.0) : l2 * 6 / 10;
  const int64_t group = s.Hq / s.Hkv, kv_bytes = s.Tk * kD * 2 * int64_t(sizeof(bf16));
  if (budget <= 0 || s.Hkv * kv_bytes <= budget) return int(s.Hq);
  const int64_t kv_heads = budget / kv_bytes;
  return int(group * (kv_heads < 1 ? 1 : kv_heads));
}

template <bool SPLIT, bool CLUSTER, bool STAGED = false>
KernelFn pick_sched(int sched) {
  return sched == kPlain     ? attention_sm90_kernel<SPLIT, kPlain, CLUSTER, STAGED, 64>
         : sched == kOverlap ? attention_sm90_kernel<SPLIT, kOverlap, CLUSTER, STAGED, 64>
                             : attention_sm90_kernel<SPLIT, kPingPong, CLUSTER, STAGED, 64>;
}
KernelFn pick(bool split, int sched, bool cluster, int keys) {
  if (keys == 80)
    return split ? attention_sm90_kernel<true, kOverlap, false, false, 80>
                 : (staged() ? attention_sm90_kernel<false, kOverlap, false, true, 80>
                             : attention_sm90_kernel<false, kOverlap, false, false, 80>);
  if (split) return cluster ? pick_sched<true, true>(sched) : pick_sched<true, false>(sched);
  if (cluster) return pick_sched<false, true>(sched);
  return staged() ? pick_sched<false, false, true>(sched) : pick_sched<false, false>(sched);
}

void launch(const AttentionShape& s, const bf16* q, const bf16* k, const bf16* v, const int64_t* q_pos,
            const int64_t* k_pos, float scale, bf16* out, cudaStream_t stream, int64_t splits, float* part_o,
            float* part_ml) {
  const CUtensorMap tq = tensor_map_sw128(q, s.Hq * kD, s.Tq, 64, "attention_prefill");
  const int keys = key_tile(s, splits > 1);
  const CUtensorMap tk = tensor_map_sw128(k, s.Hkv * kD, s.Tk, keys, "attention_prefill");
  const CUtensorMap tv = tensor_map_sw128(v, s.Hkv * kD, s.Tk, keys, "attention_prefill");
  const int sched = schedule();
  const bool cluster = use_cluster(s);
  auto* kernel = pick(splits > 1, sched, cluster, keys);
  const uint32_t smem = keys == 80 ? Layout<80>::alloc : Layout<64>::alloc;
  raise_smem_limit(kernel, smem);
  const int64_t blocks = (s.Tq + kBM - 1) / kBM * s.Hq * splits;
  HYPIC_CUDA_REQUIRE(blocks <= INT_MAX, "attention_prefill: too many query rows x heads");
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(unsigned(blocks));
  cfg.blockDim = dim3(kThreads);
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr[2] = {};
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = cluster ? 2 : 1;
  attr[0].val.clusterDim.y = attr[0].val.clusterDim.z = 1;
  attr[1].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[1].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = detail::pdl_chain_enabled() ? 2 : 1;
  HYPIC_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, tq, tk, tv, s, q_pos, k_pos, float(scale * 1.4426950408889634f),
                                      rescale_slack(), out, splits, part_o, part_ml, section_heads(s)));
  HYPIC_CUDA_LAUNCH_CHECK();
}

}  // namespace

bool attention_prefill_sm90_applies(const AttentionShape& s) {
  if (!env_enabled() || s.d != kD || s.Tq <= 0 || s.Tk <= 0) return false;
  if (s.Tq > int64_t(INT_MAX) - kBM || s.Tk > int64_t(INT_MAX) - 128) return false;  // TMA coordinates are int32
  return current_device_is_sm90();
}

int64_t attention_prefill_sm90_splits(const AttentionShape& s, int sm_count) {
  const int keys = key_tile(s, true);
  const int64_t blocks = (s.Tq + kBM - 1) / kBM * s.Hq, tiles = (s.Tk + keys - 1) / keys;
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
  launch(s, q, k, v, q_pos, k_pos, scale, out, stream, splits, part_o, part_ml);
}

}  // namespace hypic::cuda
