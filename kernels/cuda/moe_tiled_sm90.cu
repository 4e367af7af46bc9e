// Hopper-native expert GEMMs for a long prefill (hundreds of rows per expert). Written from the PTX manual.
//
// Work item = 128 grouped rows of one expert (a row tile of moe_tile_list) x 256 weight rows; items in
// (tile, weight block) order, so that the row tiles of one expert, which read the same weights, run side
// by side and share them through L2. Persistent grid (one block an SM, blocks stride over the items): the
// producer fills the next item's stages while the consumers write the last one's output.
// Block = 384 threads:
//   warpgroup 0 (producer, 40 registers): copies the A tile (128 rows x 64 columns a k step) with cp.async
//     through the plan's row index, eight threads a row, writing the 128-byte swizzle by hand; each thread's
//     arrival on the stage's mbarrier fires when its copies land (cp.async.mbarrier.arrive.noinc). Thread 0
//     also loads the stage's 256 weight rows by TMA (already swizzled) on the same mbarrier.
//   warpgroups 1 and 2 (consumers, 232 registers): 64 rows each; per k step of 64 four wgmma m64n256k16 with
//     both operands in shared memory, one group in flight, a stage released as soon as the group after
//     it was issued and the one reading it is done.
// Four stages of 48 KB. Gate/up: the 256 weight rows are 128 gate rows and the same 128 up rows, so that
// accumulator columns c and c + 128 of a thread are a SwiGLU pair; the block writes 128 activation columns.
// Down: 256 output columns.
// The epilogue's forms: Epilogue below.
#include <cstdlib>
#include <cstring>
#include <string>

#include "kernels/cuda/check.h"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/env_switch.h"
#include "kernels/cuda/mma.cuh"
#include "kernels/cuda/moe_tiled.h"
#include "kernels/cuda/moe_tiled_sm90.h"
#include "kernels/cuda/pdl_launch.cuh"
#include "kernels/cuda/sm90.cuh"
#include "kernels/cuda/sm90_host.h"
#include "kernels/cuda/smem_limit.h"

namespace hypic::cuda {
namespace {

constexpr int kBM = 128, kBN = 256, kBK = 64, kThreads = 384;
constexpr uint32_t kABytes = kBM * 128, kBBytes = kBN * 128, kStageBytes = kABytes + kBBytes;
static_assert(kBM == 128, "the producer warpgroup holds one thread per A row (row offsets)");
static_assert(kBM == kMoeTileRows, "row tiles as moe_tile_list / moe_plan_tiles_device make them");
static_assert(kABytes % 1024 == 0 && kStageBytes % 1024 == 0, "swizzle atoms stay 1024-aligned");

// How the consumers write an item's output (HYPIC_CUDA_MOE_SM90_EPI, for A/B runs; both write the same bits):
//   kWarpStaged (default): each consumer warp turns its 16 rows into bf16 in its own 4 KB of shared memory, 128
//     columns a pass (16-byte pieces swizzled so that neither side conflicts), and stores whole 256-byte row
//     pieces, 16 bytes a lane;
//   kDirect: straight from the accumulators, 4 bytes a lane: each store touches 8 rows with 16 bytes each (half
//     sectors), four times the store instructions. The 8k prefill's MoE layer: 1.210 -> 1.084 ms staged.
// (Tried too: the item's whole output into a shared tile, three stages instead of four to make room, and one
// bulk copy a row that the consumers do not wait for: 1.172 ms.)
enum Epilogue { kDirect = 0, kWarpStaged = 1 };

template <int kEpi>
struct MoeSmem {
  static constexpr int stages = 4;
  static constexpr uint32_t bars = stages * kStageBytes;                   // full[stages], empty[stages]
  static constexpr uint32_t rows = bars + 2 * stages * 8;                  // int64 [kBM]: A rows' offsets in x, -1 past the end
  static constexpr uint32_t out = rows + kBM * 8;                          // kWarpStaged: [8 warps][16 rows][128 columns] bf16
  static constexpr uint32_t out_bytes = kEpi == kWarpStaged ? 8 * 16 * 256 : 0;
  static constexpr uint32_t alloc = out + out_bytes + 1024;                // slack to align the base to 1024
  static_assert(alloc <= 227 * 1024, "fits one H100/H200 block");
};

template <bool kSwiGlu, int kEpi>
__global__ void __launch_bounds__(kThreads, 1)
    moe_sm90_kernel(const __grid_constant__ CUtensorMap wmap, const bf16* __restrict__ x, int K,
                    const int32_t* __restrict__ src, const int32_t* __restrict__ offsets,
                    const int2* __restrict__ tiles, int slots, int N, bf16* __restrict__ out) {
#if HYPIC_SM90A
  using namespace sm90;
  detail::pdl_wait();  // programmatic launch: the rows and the tile list are the kernels before's
  constexpr int kProducerRegs = 40, kConsumerRegs = 232;
  extern __shared__ unsigned char smem_raw[];
  constexpr int kOutCols = kSwiGlu ? kBN / 2 : kBN;  // output columns of one item
  using L = MoeSmem<kEpi>;
  constexpr int kStages = L::stages;
  unsigned char* smem = reinterpret_cast<unsigned char*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  uint64_t* full = reinterpret_cast<uint64_t*>(smem + L::bars);
  uint64_t* empty = full + kStages;
  int64_t* row_off = reinterpret_cast<int64_t*>(smem + L::rows);
  const int tid = int(threadIdx.x), warp = tid / 32, lane = tid % 32;
  const int nbs = N / kOutCols, items = slots * nbs, KT = K / kBK;

  if (tid == 0) {
    for (int i = 0; i < kStages; ++i) {
      mbar_init(full + i, kBM + 1);  // each producer thread (its copies landed) + the weight copy's byte count
      mbar_init(empty + i, 8);       // lane 0 of each consumer warp
    }
    mbar_fence_init();
  }
  __syncthreads();

  if (warp < 4) {
    // ---------------- producer ----------------
    setmaxnreg_dec<kProducerRegs>();
    if (tid == 0) prefetch_tensor_map(&wmap);
    int stage = 0;
    uint32_t phase = 0;
    for (int item = int(blockIdx.x); item < items; item += int(gridDim.x)) {
      const int2 tile = tiles[item / nbs];
      if (tile.x < 0) break;  // the list holds the tiles first, then empty slots
      const int nb = item % nbs, e = tile.x, row0 = tile.y, rows = min(kBM, offsets[e + 1] - row0);
      // The tile's row offsets, once an item; then thread i copies 16-byte piece i % 8 of rows i / 8 + 16 j
      // (eight threads read one row's 128 bytes: whole lines).
      named_barrier(1, kBM);  // every producer thread is done with the previous item's offsets
      row_off[tid] = tid < rows ? int64_t(src ? src[row0 + tid] : row0 + tid) * K : -1;
      named_barrier(1, kBM);
      const int wrow = kSwiGlu ? e * 2 * N + nb * kOutCols : e * N + nb * kOutCols;
      const int piece = tid % 8;
      for (int kt = 0; kt < KT; ++kt) {
        mbar_wait(empty + stage, phase ^ 1);
        unsigned char* sa = smem + stage * kStageBytes;
        unsigned char* sb = sa + kABytes;
        if (tid == 0) {
          mbar_arrive_expect_tx(full + stage, kBBytes);
          if constexpr (kSwiGlu) {
            tma_load_2d(sb, &wmap, kt * kBK, wrow, full + stage);
            tma_load_2d(sb + kBBytes / 2, &wmap, kt * kBK, wrow + N, full + stage);
          } else {
            tma_load_2d(sb, &wmap, kt * kBK, wrow, full + stage);
          }
        }
#pragma unroll
        for (int j = 0; j < kBM / 16; ++j) {
          const int r = tid / 8 + 16 * j;
          const int64_t off = row_off[r];
          detail::cp_async_16(sa + r * 128 + ((piece ^ (r & 7)) << 4), off >= 0 ? x + off + kt * kBK + 8 * piece : x,
                              off >= 0 ? 16 : 0);
        }
        cp_async_arrive_noinc(full + stage);
        if (++stage == kStages) {
          stage = 0;
          phase ^= 1;
        }
      }
    }
    detail::cp_async_wait<0>();  // none of this block's copies outlives it
  } else {
    // ---------------- consumers ----------------
    setmaxnreg_inc<kConsumerRegs>();
    const int wg = warp / 4 - 1, w = warp % 4, g = lane / 4, t = lane % 4;
    int stage = 0;
    uint32_t phase = 0;
    auto release = [&](int s) {
      __syncwarp();
      if (lane == 0) mbar_arrive(empty + s);
    };
    float acc[128];
#pragma unroll
    for (int i = 0; i < 128; ++i) acc[i] = 0.0f;
    for (int item = int(blockIdx.x); item < items; item += int(gridDim.x)) {
      const int2 tile = tiles[item / nbs];
      if (tile.x < 0) break;
      const int nb = item % nbs, e = tile.x, row0 = tile.y, rows = min(kBM, offsets[e + 1] - row0);
      // An expert's last tile often holds a few rows: a warpgroup without any leaves the tensor cores to the
      // other one (which then runs at the full rate) and only releases the stages.
      const bool active = wg * 64 < rows;
      int prev = -1;
      for (int kt = 0; kt < KT; ++kt) {
        mbar_wait(full + stage, phase);
        const unsigned char* sa = smem + stage * kStageBytes + wg * (kABytes / 2);
        const unsigned char* sb = smem + stage * kStageBytes + kABytes;
        if (active) {
          wgmma_fence();
#pragma unroll
          for (int kk = 0; kk < kBK / 16; ++kk)
            wgmma_m64n256k16_ss(acc, desc_sw128(sa + 32 * kk, 16, 1024), desc_sw128(sb + 32 * kk, 16, 1024),
                                (kt | kk) != 0);
          wgmma_commit();
        }
        wgmma_wait<1>();
        if (prev >= 0) release(prev);
        prev = stage;
        if (++stage == kStages) {
          stage = 0;
          phase ^= 1;
        }
      }
      wgmma_wait<0>();
      fence_regs(acc);
      if (prev >= 0) release(prev);

      // Thread (w, g, t) holds rows 16 w + g and + 8 of its warpgroup's 64, columns 8 j + 2 t and + 1.
      const auto value = [&](int j, int h, int e) {  // output column 8 j + 2 t + e of row g + 8 h
        if constexpr (kSwiGlu) return detail::silu_f(acc[4 * j + 2 * h + e]) * acc[4 * (j + 16) + 2 * h + e];
        else return acc[4 * j + 2 * h + e];
      };
      if constexpr (kEpi == kWarpStaged) {
        // Per pass of 128 columns: row lr's 16-byte piece c sits at piece c ^ (lr & 7) of the warp's row.
        unsigned char* stage_out = smem + L::out + (warp - 4) * (16 * 256);
        unsigned char* put = stage_out + g * 256 + 4 * t;  // row g (+ 8 h), piece c at c ^ g
        const int lr0 = lane / 16, c_in = lane % 16;      // read back: rows lr0 + 2 i, piece c_in
        const unsigned char* get = stage_out + lr0 * 256 + 16 * c_in;
        const int left = rows - (wg * 64 + 16 * w + lr0);   // this lane's rows 2 i < left exist
        bf16* dst = out + int64_t(row0 + wg * 64 + 16 * w + lr0) * N + nb * kOutCols + 8 * c_in;
#pragma unroll
        for (int pass = 0; pass < kOutCols / 128; ++pass) {
#pragma unroll
          for (int h = 0; h < 2; ++h)
#pragma unroll
            for (int c = 0; c < 16; ++c)
              *reinterpret_cast<uint32_t*>(put + h * 8 * 256 + ((c ^ g) << 4)) =
                  detail::pack_bf16(value(16 * pass + c, h, 0), value(16 * pass + c, h, 1));
          __syncwarp();
#pragma unroll
          for (int i = 0; i < 8; ++i) {
            const int lr = lr0 + 2 * i;
            const uint4 v = *reinterpret_cast<const uint4*>(get + 2 * i * 256 + (((c_in ^ lr) & 7) - (c_in & 7)) * 16);
            if (2 * i < left) *reinterpret_cast<uint4*>(dst + int64_t(2 * i) * N + pass * 128) = v;
          }
          __syncwarp();
        }
      } else {
        const int r0 = wg * 64 + 16 * w + g;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int r = r0 + 8 * h;
          if (r >= rows) continue;
          bf16* o = out + int64_t(row0 + r) * N + nb * kOutCols + 2 * t;
#pragma unroll
          for (int j = 0; j < kOutCols / 8; ++j)
            *reinterpret_cast<uint32_t*>(o + 8 * j) = detail::pack_bf16(value(j, h, 0), value(j, h, 1));
        }
      }
    }
  }
#else
  // Built without the sm_90a target (plain sm_90): fail loudly rather than return nothing on a Hopper GPU.
  __trap();
#endif
}

// Read on every call (a getenv is cheap next to a launch) so that a bench can time both forms in one process.
bool env_enabled() { return !env_is("HYPIC_CUDA_MOE_SM90", "0"); }

// HYPIC_CUDA_MOE_SM90_EPI=0: the direct epilogue (Epilogue), for A/B runs.
int epilogue_form() { return env_is("HYPIC_CUDA_MOE_SM90_EPI", "0") ? kDirect : kWarpStaged; }

template <bool kSwiGlu, int kEpi>
void launch_form(const CUtensorMap& wmap, const bf16* x, int64_t K, const int32_t* src, const int32_t* offsets,
                 const int2* tiles, int64_t slots, int64_t N, bf16* out, int64_t grid, cudaStream_t stream) {
  auto* kernel = moe_sm90_kernel<kSwiGlu, kEpi>;
  constexpr uint32_t bytes = MoeSmem<kEpi>::alloc;
  raise_smem_limit(kernel, bytes);
  detail::launch_pdl(detail::pdl_chain_enabled(), kernel, dim3(unsigned(grid)), dim3(kThreads), bytes, stream, wmap, x,
                     int(K), src, offsets, tiles, int(slots), int(N), out);
}

template <bool kSwiGlu>
void launch(const CUtensorMap& wmap, const bf16* x, int64_t K, const int32_t* src, const int32_t* offsets,
            const int2* tiles, int64_t slots, int64_t N, bf16* out, cudaStream_t stream, const char* what) {
  HYPIC_CUDA_REQUIRE(reinterpret_cast<uintptr_t>(x) % 16 == 0 && reinterpret_cast<uintptr_t>(out) % 16 == 0,
                     std::string(what) + ": operands must be 16-byte aligned");
  const int64_t items = slots * (N / (kSwiGlu ? kBN / 2 : kBN));
  HYPIC_CUDA_REQUIRE(slots > 0 && items < (int64_t{1} << 31) && K < (int64_t{1} << 31) && N < (int64_t{1} << 30),
                     std::string(what) + ": shape too large");
  const int sms = detail::device_sm_count();
  const int64_t grid = items < sms ? items : sms;
  if (epilogue_form() == kDirect)
    launch_form<kSwiGlu, kDirect>(wmap, x, K, src, offsets, tiles, slots, N, out, grid, stream);
  else
    launch_form<kSwiGlu, kWarpStaged>(wmap, x, K, src, offsets, tiles, slots, N, out, grid, stream);
  HYPIC_CUDA_LAUNCH_CHECK();
}

}  // namespace

bool moe_tiled_sm90_gate_up_applies(int64_t D, int64_t I) {
  return env_enabled() && D > 0 && I > 0 && D % kBK == 0 && I % (kBN / 2) == 0 && current_device_is_sm90();
}

bool moe_tiled_sm90_down_applies(int64_t D, int64_t I) {
  return env_enabled() && D > 0 && I > 0 && D % kBN == 0 && I % kBK == 0 && current_device_is_sm90();
}

void moe_tiled_sm90_gate_up(const bf16* x, int64_t D, const int32_t* src_rows, const int32_t* offsets, int64_t E,
                            const int2* tiles, int64_t slots, const bf16* gate_up, int64_t I, bf16* act,
                            cudaStream_t stream) {
  HYPIC_CUDA_REQUIRE(D % kBK == 0 && I % (kBN / 2) == 0 && E > 0 && E * 2 * I < (int64_t{1} << 31),
                     "moe_tiled_sm90_gate_up: bad D, I or E");
  const CUtensorMap wmap = tensor_map_sw128(gate_up, D, E * 2 * I, kBN / 2, "moe_tiled_sm90_gate_up");
  launch<true>(wmap, x, D, src_rows, offsets, tiles, slots, I, act, stream, "moe_tiled_sm90_gate_up");
}

void moe_tiled_sm90_down(const bf16* act, int64_t I, const int32_t* offsets, int64_t E, const int2* tiles,
                         int64_t slots, const bf16* down, int64_t D, bf16* ys, cudaStream_t stream) {
  HYPIC_CUDA_REQUIRE(D % kBN == 0 && I % kBK == 0 && E > 0 && E * D < (int64_t{1} << 31),
                     "moe_tiled_sm90_down: bad D, I or E");
  const CUtensorMap wmap = tensor_map_sw128(down, I, E * D, kBN, "moe_tiled_sm90_down");
  launch<false>(wmap, act, I, nullptr, offsets, tiles, slots, D, ys, stream, "moe_tiled_sm90_down");
}

}  // namespace hypic::cuda
