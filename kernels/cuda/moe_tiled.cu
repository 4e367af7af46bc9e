#include <string>

#include "kernels/cuda/check.h"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/mma.cuh"
#include "kernels/cuda/moe_tiled.h"
#include "kernels/cuda/moe_tiled_sm90.h"
#include "kernels/cuda/smem_limit.h"

namespace hypic::cuda {
namespace {

// Block = 128 grouped rows of one expert x 128 weight rows, k in steps of 64 through a 3-stage cp.async
// ring; 2 x 2 warps, each 64 rows x 64 weight rows (4 x 8 mma tiles), two blocks an SM (one block of 256
// weight rows, 8 warps, measured slower: docs/benchmarks.md). Rows padded by 16 bytes (kLd): the 8 row
// addresses of an ldmatrix fall on distinct banks.
constexpr int kBM = 128, kBN = 128, kBK = 64, kStages = 3, kLd = kBK + 8, kWN = 2, kThreads = 128;
constexpr int kStageElems = (kBM + kBN) * kLd;
static_assert(kBM == kMoeTileRows, "row tiles as moe_tile_list / moe_plan_tiles_device make them");
constexpr int kSmemBytes = kStages * kStageElems * int(sizeof(bf16));
constexpr int kChunksA = kBM * kBK / 8 / kThreads, kChunksB = kBN * kBK / 8 / kThreads;  // 16-byte copies a stage
constexpr int kMaxE = 1024;

// kSwiGlu: the block's weight rows are 64 output columns twice, gate and up, arranged so that each warp
// column holds 32 gate rows then the same 32 up rows: the SwiGLU pairs then meet in one lane's
// accumulators (n-tile j and j + 4). Otherwise weight rows n0 .. n0 + 127 of [N, K].
template <bool kSwiGlu>
__global__ void __launch_bounds__(kThreads, 2)
    tiled_kernel(const bf16* __restrict__ x, int K, const int32_t* __restrict__ src, const int32_t* __restrict__ offsets,
                 const int2* __restrict__ tiles, const bf16* __restrict__ w, int N, bf16* __restrict__ out) {
  const int2 tile = tiles[blockIdx.y];
  const int e = tile.x;
  if (e < 0) return;
  const int row0 = tile.y, rows = min(kBM, offsets[e + 1] - row0);
  extern __shared__ __align__(128) unsigned char smem_raw[];
  bf16* smem = reinterpret_cast<bf16*>(smem_raw);
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32, wm = warp / kWN, wn = warp % kWN;
  const int n0 = blockIdx.x * (kSwiGlu ? kBN / 2 : kBN);
  const bf16* we = w + int64_t(e) * (kSwiGlu ? 2 * N : N) * K;

  // This thread copies column chunk tid % 8 of tile rows tid / 8 + (kThreads / 8) i of both operands.
  constexpr int kRowStep = kThreads / 8;
  const int cc = 8 * (tid % 8);
  const bf16* a_src[kChunksA];
  const bf16* b_src[kChunksB];
  uint32_t a_ok = 0;
#pragma unroll
  for (int i = 0; i < kChunksA; ++i) {
    const int r = tid / 8 + kRowStep * i;
    const bool ok = r < rows;
    a_ok |= uint32_t(ok) << i;
    a_src[i] = x + (ok ? int64_t(src ? src[row0 + r] : row0 + r) * K : 0) + cc;
  }
#pragma unroll
  for (int i = 0; i < kChunksB; ++i) {
    const int r = tid / 8 + kRowStep * i;
    int wr = n0 + r;
    if constexpr (kSwiGlu) {
      const int within = r % 64;
      wr = n0 + 32 * (r / 64) + within % 32 + (within < 32 ? 0 : N);
    }
    b_src[i] = we + int64_t(wr) * K + cc;
  }
  auto load_stage = [&](int stage, int kt) {
    bf16* sa = smem + stage * kStageElems;
    bf16* sb = sa + kBM * kLd;
    const int k = kt * kBK;
#pragma unroll
    for (int i = 0; i < kChunksA; ++i) {
      const int r = tid / 8 + kRowStep * i;
      const bool ok = (a_ok >> i) & 1;
      detail::cp_async_16(sa + r * kLd + cc, ok ? a_src[i] + k : x, ok ? 16 : 0);
    }
#pragma unroll
    for (int i = 0; i < kChunksB; ++i) detail::cp_async_16(sb + (tid / 8 + kRowStep * i) * kLd + cc, b_src[i] + k, 16);
  };

  float acc[4][8][4];
#pragma unroll
  for (int mi = 0; mi < 4; ++mi)
#pragma unroll
    for (int j = 0; j < 8; ++j) acc[mi][j][0] = acc[mi][j][1] = acc[mi][j][2] = acc[mi][j][3] = 0.0f;

  const int KT = K / kBK;
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < KT) load_stage(s, s);
    detail::cp_async_commit();
  }
  const int a_off = (wm * 64 + (lane & 15)) * kLd + (lane >> 4) * 8;
  const int b_off = kBM * kLd + (wn * 64 + (lane & 7) + ((lane >> 4) << 3)) * kLd + ((lane >> 3) & 1) * 8;
  for (int kt = 0; kt < KT; ++kt) {
    detail::cp_async_wait<kStages - 2>();
    __syncthreads();  // stage kt landed for everyone; everyone is done with the stage the next copy refills
    if (kt + kStages - 1 < KT) load_stage((kt + kStages - 1) % kStages, kt + kStages - 1);
    detail::cp_async_commit();
    const bf16* st = smem + (kt % kStages) * kStageElems;
#pragma unroll
    for (int ks = 0; ks < kBK / 16; ++ks) {
      uint32_t a[4][4], b[4][4];
#pragma unroll
      for (int mi = 0; mi < 4; ++mi) detail::ldmatrix_x4(a[mi], st + a_off + mi * 16 * kLd + ks * 16);
#pragma unroll
      for (int np = 0; np < 4; ++np) detail::ldmatrix_x4(b[np], st + b_off + np * 16 * kLd + ks * 16);
#pragma unroll
      for (int mi = 0; mi < 4; ++mi)
#pragma unroll
        for (int np = 0; np < 4; ++np) {
          detail::mma_bf16_16816(acc[mi][2 * np], a[mi], b[np]);
          detail::mma_bf16_16816(acc[mi][2 * np + 1], a[mi], b[np] + 2);
        }
    }
  }
  detail::cp_async_wait<0>();

  const int g = lane / 4, t = lane % 4;
#pragma unroll
  for (int mi = 0; mi < 4; ++mi)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = wm * 64 + mi * 16 + g + 8 * h;
      if (r >= rows) continue;
      bf16* o = out + int64_t(row0 + r) * N;
      if constexpr (kSwiGlu) {
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const float v0 = detail::silu_f(acc[mi][j][2 * h]) * acc[mi][j + 4][2 * h];
          const float v1 = detail::silu_f(acc[mi][j][2 * h + 1]) * acc[mi][j + 4][2 * h + 1];
          *reinterpret_cast<__nv_bfloat162*>(o + n0 + 32 * wn + 8 * j + 2 * t) = __floats2bfloat162_rn(v0, v1);
        }
      } else {
#pragma unroll
        for (int j = 0; j < 8; ++j)
          *reinterpret_cast<__nv_bfloat162*>(o + n0 + 64 * wn + 8 * j + 2 * t) =
              __floats2bfloat162_rn(acc[mi][j][2 * h], acc[mi][j][2 * h + 1]);
      }
    }
}

// One block of kMaxE threads, one per expert: its row-tile count, an exclusive scan over the block, then
// every thread writes its expert's tiles; the rest of the slots are marked empty.
__global__ void __launch_bounds__(kMaxE) tile_list_kernel(const int32_t* __restrict__ offsets, int E, int2* tiles,
                                                          int slots) {
  __shared__ int warp_total[kMaxE / 32];
  const int e = threadIdx.x;
  const int n = e < E ? (offsets[e + 1] - offsets[e] + kBM - 1) / kBM : 0;
  int total;
  const int first = detail::block_exclusive_scan<kMaxE>(n, warp_total, &total);
  for (int j = 0; j < n; ++j) tiles[first + j] = make_int2(e, offsets[e] + j * kBM);
  for (int i = total + e; i < slots; i += kMaxE) tiles[i] = make_int2(-1, 0);
}

template <bool kSwiGlu>
void launch(const bf16* x, int64_t K, const int32_t* src, const int32_t* offsets, const int2* tiles, int64_t slots,
            const bf16* w, int64_t N, bf16* out, cudaStream_t stream, const char* what) {
  HYPIC_CUDA_REQUIRE(reinterpret_cast<uintptr_t>(x) % 16 == 0 && reinterpret_cast<uintptr_t>(w) % 16 == 0,
                     std::string(what) + ": operands must be 16-byte aligned");
  HYPIC_CUDA_REQUIRE(slots > 0 && slots <= 65535, std::string(what) + ": bad tile slot count");
  raise_smem_limit(tiled_kernel<kSwiGlu>, kSmemBytes);
  const dim3 grid(unsigned(N / (kSwiGlu ? kBN / 2 : kBN)), unsigned(slots));
  tiled_kernel<kSwiGlu><<<grid, kThreads, kSmemBytes, stream>>>(x, int(K), src, offsets, tiles, w, int(N), out);
  HYPIC_CUDA_CHECK(cudaGetLastError());
}

}  // namespace

int64_t moe_tile_slots(int64_t R, int64_t E) { return R / kBM + 1 + E; }

bool moe_tiled_supported(int64_t D, int64_t I, int64_t R, int64_t E) {
  return D > 0 && I > 0 && D % 128 == 0 && I % 64 == 0 && D < (int64_t{1} << 24) && I < (int64_t{1} << 24) &&
         R > 0 && R < (int64_t{1} << 30) && E > 0 && E <= kMaxE && moe_tile_slots(R, E) <= 65535;
}

void moe_tile_list(const int32_t* offsets, int64_t E, int2* tiles, int64_t slots, cudaStream_t stream) {
  HYPIC_CUDA_REQUIRE(E > 0 && E <= kMaxE && slots > 0 && slots <= 65535, "moe_tile_list: bad expert or slot count");
  tile_list_kernel<<<1, kMaxE, 0, stream>>>(offsets, int(E), tiles, int(slots));
  HYPIC_CUDA_CHECK(cudaGetLastError());
}

void moe_tiled_gate_up(const bf16* x, int64_t D, const int32_t* src_rows, const int32_t* offsets, int64_t E,
                       const int2* tiles, int64_t slots, const bf16* gate_up, int64_t I, bf16* act, cudaStream_t stream) {
  HYPIC_CUDA_REQUIRE(D > 0 && D % kBK == 0 && I > 0 && I % 64 == 0, "moe_tiled_gate_up: bad D or I");
  if (moe_tiled_sm90_gate_up_applies(D, I))
    return moe_tiled_sm90_gate_up(x, D, src_rows, offsets, E, tiles, slots, gate_up, I, act, stream);
  launch<true>(x, D, src_rows, offsets, tiles, slots, gate_up, I, act, stream, "moe_tiled_gate_up");
}

void moe_tiled_down(const bf16* act, int64_t I, const int32_t* offsets, int64_t E, const int2* tiles, int64_t slots,
                    const bf16* down, int64_t D, bf16* ys, cudaStream_t stream) {
  HYPIC_CUDA_REQUIRE(D > 0 && D % 128 == 0 && I > 0 && I % kBK == 0, "moe_tiled_down: bad D or I");
  if (moe_tiled_sm90_down_applies(D, I))
    return moe_tiled_sm90_down(act, I, offsets, E, tiles, slots, down, D, ys, stream);
  launch<false>(act, I, nullptr, offsets, tiles, slots, down, D, ys, stream, "moe_tiled_down");
}

}  // namespace hypic::cuda
