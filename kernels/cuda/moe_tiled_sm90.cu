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
#include <cstdlib>
#include <cstring>
#include <string>

#include "kernels/cuda/check.h"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/mma.cuh"
#include "kernels/cuda/moe_tiled_sm90.h"
#include "kernels/cuda/sm90.cuh"
#include "kernels/cuda/sm90_host.h"

namespace hypic::cuda {
namespace {

constexpr int kBM = 128, kBN = 256, kBK = 64, kStages = 4, kThreads = 384;
constexpr uint32_t kABytes = kBM * 128, kBBytes = kBN * 128, kStageBytes = kABytes + kBBytes;
constexpr uint32_t kBarsAt = kStages * kStageBytes;         // full[kStages], empty[kStages]
constexpr uint32_t kRowsAt = kBarsAt + 2 * kStages * 8;      // int64 [kBM]: the A tile's row offsets in x, -1 past the end
constexpr uint32_t kAlloc = kRowsAt + kBM * 8 + 1024;        // slack to align the base to 1024
static_assert(kAlloc <= 227 * 1024, "fits one H100/H200 block");
static_assert(kBM == 128, "the producer warpgroup holds one thread per A row (row offsets)");
static_assert(kABytes % 1024 == 0 && kStageBytes % 1024 == 0, "swizzle atoms stay 1024-aligned");

// x: [*, K] bf16, A rows (through src when given); w: the tensor map over all experts' weight rows
// ([E * 2N, K] gate/up, [E * N, K] down); out: [R, N] bf16.
template <bool kSwiGlu>
__global__ void __launch_bounds__(kThreads, 1)
    moe_sm90_kernel(const __grid_constant__ CUtensorMap wmap, const bf16* __restrict__ x, int K,
                    const int32_t* __restrict__ src, const int32_t* __restrict__ offsets,
                    const int2* __restrict__ tiles, int slots, int N, bf16* __restrict__ out) {
#if HYPIC_SM90A
  using namespace sm90;
  constexpr int kProducerRegs = 40, kConsumerRegs = 232;
  extern __shared__ unsigned char smem_raw[];
  unsigned char* smem = reinterpret_cast<unsigned char*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  uint64_t* full = reinterpret_cast<uint64_t*>(smem + kBarsAt);
  uint64_t* empty = full + kStages;
  int64_t* row_off = reinterpret_cast<int64_t*>(smem + kRowsAt);
  const int tid = int(threadIdx.x), warp = tid / 32, lane = tid % 32;
  constexpr int kOutCols = kSwiGlu ? kBN / 2 : kBN;  // output columns of one item
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
      const int r0 = wg * 64 + 16 * w + g;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int r = r0 + 8 * h;
        if (r >= rows) continue;
        bf16* o = out + int64_t(row0 + r) * N + nb * kOutCols + 2 * t;
        if constexpr (kSwiGlu) {
#pragma unroll
          for (int j = 0; j < 16; ++j) {
            const float v0 = detail::silu_f(acc[4 * j + 2 * h]) * acc[4 * (j + 16) + 2 * h];
            const float v1 = detail::silu_f(acc[4 * j + 2 * h + 1]) * acc[4 * (j + 16) + 2 * h + 1];
            *reinterpret_cast<uint32_t*>(o + 8 * j) = detail::pack_bf16(v0, v1);
          }
        } else {
#pragma unroll
          for (int j = 0; j < 32; ++j)
            *reinterpret_cast<uint32_t*>(o + 8 * j) = detail::pack_bf16(acc[4 * j + 2 * h], acc[4 * j + 2 * h + 1]);
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
bool env_enabled() {
  const char* e = std::getenv("HYPIC_CUDA_MOE_SM90");
  return !(e && std::strcmp(e, "0") == 0);
}

template <bool kSwiGlu>
void launch(const CUtensorMap& wmap, const bf16* x, int64_t K, const int32_t* src, const int32_t* offsets,
            const int2* tiles, int64_t slots, int64_t N, bf16* out, cudaStream_t stream, const char* what) {
  HYPIC_CUDA_REQUIRE(reinterpret_cast<uintptr_t>(x) % 16 == 0 && reinterpret_cast<uintptr_t>(out) % 16 == 0,
                     std::string(what) + ": operands must be 16-byte aligned");
  const int64_t items = slots * (N / (kSwiGlu ? kBN / 2 : kBN));
  HYPIC_CUDA_REQUIRE(slots > 0 && items < (int64_t{1} << 31) && K < (int64_t{1} << 31) && N < (int64_t{1} << 30),
                     std::string(what) + ": shape too large");
  int dev = 0, sms = 0;
  HYPIC_CUDA_CHECK(cudaGetDevice(&dev));
  HYPIC_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  auto* kernel = moe_sm90_kernel<kSwiGlu>;
  HYPIC_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kAlloc)));
  const int64_t grid = items < sms ? items : sms;
  kernel<<<unsigned(grid), kThreads, kAlloc, stream>>>(wmap, x, int(K), src, offsets, tiles, int(slots), int(N), out);
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
