#include "kernels/cuda/check.h"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/mma.cuh"
#include "kernels/cuda/moe_grouped_mma.h"

namespace hypic::cuda {
namespace {

// A warp computes a 16 x (8 * kTiles) block: 16 weight rows against up to 32 grouped rows.
constexpr int kWarps = 4, kThreads = kWarps * 32, kTiles = 4, kRowsPerPass = 8 * kTiles;

// Both operands come straight from global memory with one 16-byte load per lane: for a 32-wide k chunk,
// lane (g = lane / 4, t = lane % 4) loads elements 8t .. 8t + 7 of weight rows g and g + 8 and of grouped
// row g. The two mma.sync of the chunk then see the k positions permuted in the same way in A and B
// (their logical k 2t, 2t+1, 2t+8, 2t+9 are elements 8t .. 8t+3 of the first, 8t+4 .. 8t+7 of the
// second), which leaves every dot product unchanged and needs neither shared memory nor ldmatrix.
//   w[m]: weight row g of matrix m (row 8 below it is w[m] + 8 * K), K elements per row, K % 32 == 0
//   x:    x[j] this lane's row (8j + g) of the pass, K elements; n of the pass's rows are valid (n <= 32)
//   acc:  acc[m][j] the C fragment of rows 8j .. 8j + 7 of the pass
// kUnroll chunks of loads are issued before their mmas: the weights are read once, so what bounds the
// kernel is how many of their loads are in flight.
template <int kMats, int kUnroll>
__device__ __forceinline__ void warp_block(const __nv_bfloat16* const (&w)[kMats], int K,
                                           const __nv_bfloat16* const (&x)[kTiles], int n, int lane,
                                           float (&acc)[kMats][kTiles][4]) {
  const int g = lane / 4, t = lane % 4;
  const int64_t row8 = int64_t(8) * K;
  for (int k0 = 8 * t; k0 < K; k0 += 32 * kUnroll) {
    uint4 wa[kUnroll][kMats], wb[kUnroll][kMats], xv[kUnroll][kTiles];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int k = k0 + 32 * u;
      const bool in = k < K;  // the same for every lane: K % 32 == 0
#pragma unroll
      for (int m = 0; m < kMats; ++m) {
        wa[u][m] = in ? __ldcs(reinterpret_cast<const uint4*>(w[m] + k)) : make_uint4(0, 0, 0, 0);
        wb[u][m] = in ? __ldcs(reinterpret_cast<const uint4*>(w[m] + row8 + k)) : make_uint4(0, 0, 0, 0);
      }
#pragma unroll
      for (int j = 0; j < kTiles; ++j)
        xv[u][j] = in && 8 * j + g < n ? __ldg(reinterpret_cast<const uint4*>(x[j] + k))
                                       : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
#pragma unroll
      for (int j = 0; j < kTiles; ++j) {
        if (8 * j >= n) break;  // warp-uniform
        const uint32_t b0[2] = {xv[u][j].x, xv[u][j].y}, b1[2] = {xv[u][j].z, xv[u][j].w};
#pragma unroll
        for (int m = 0; m < kMats; ++m) {
          const uint32_t a0[4] = {wa[u][m].x, wb[u][m].x, wa[u][m].y, wb[u][m].y};
          const uint32_t a1[4] = {wa[u][m].z, wb[u][m].z, wa[u][m].w, wb[u][m].w};
          detail::mma_bf16_16816(acc[m][j], a0, b0);
          detail::mma_bf16_16816(acc[m][j], a1, b1);
        }
      }
  }
}

// Block = (64 output columns, one routed expert); warp = 16 of them. kSwiGlu: the expert's weights are
// [2N, K] (N gate rows, then N up rows) and the warp takes the same 16 gate and up rows, so SwiGLU pairs
// meet in one lane's accumulators; otherwise [N, K]. src (or null): grouped row r is x's row src[r].
template <bool kSwiGlu>
__global__ void __launch_bounds__(kThreads) expert_kernel(const __nv_bfloat16* __restrict__ x, int K,
                                                          const int32_t* __restrict__ src,
                                                          const int32_t* __restrict__ offsets,
                                                          const int32_t* __restrict__ experts,
                                                          const __nv_bfloat16* __restrict__ weights, int N,
                                                          __nv_bfloat16* __restrict__ out) {
  constexpr int kMats = kSwiGlu ? 2 : 1;
  const int e = experts[blockIdx.y];
  if (e < 0) return;
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int n0 = (blockIdx.x * kWarps + threadIdx.x / 32) * 16;
  if (n0 >= N) return;
  const int begin = offsets[e], end = offsets[e + 1];
  const __nv_bfloat16* w0 = weights + (int64_t(e) * kMats * N + n0 + g) * K;
  __nv_bfloat16 const* w[kMats];
#pragma unroll
  for (int m = 0; m < kMats; ++m) w[m] = w0 + int64_t(m) * N * K;
  for (int r0 = begin; r0 < end; r0 += kRowsPerPass) {
    const int n = min(end - r0, kRowsPerPass);
    float acc[kMats][kTiles][4] = {};
    const __nv_bfloat16* xr[kTiles];
#pragma unroll
    for (int j = 0; j < kTiles; ++j) {
      const int r = r0 + 8 * j + g;
      xr[j] = x + (r < end ? int64_t(src ? src[r] : r) * K : 0);
    }
    warp_block<kMats, kSwiGlu ? 2 : 4>(w, K, xr, n, lane, acc);
#pragma unroll
    for (int j = 0; j < kTiles; ++j)
#pragma unroll
      for (int q = 0; q < 2; ++q) {
        const int r = 8 * j + 2 * t + q;
        if (r >= n) continue;
        __nv_bfloat16* o = out + int64_t(r0 + r) * N + n0 + g;
        if constexpr (kSwiGlu) {
          o[0] = __float2bfloat16_rn(detail::silu_f(acc[0][j][q]) * acc[1][j][q]);
          o[8] = __float2bfloat16_rn(detail::silu_f(acc[0][j][2 + q]) * acc[1][j][2 + q]);
        } else {
          o[0] = __float2bfloat16_rn(acc[0][j][q]);
          o[8] = __float2bfloat16_rn(acc[0][j][2 + q]);
        }
      }
  }
}

void check_args(const void* in, int64_t D, int64_t I, int64_t slots, const char* what) {
  HYPIC_CUDA_REQUIRE(moe_grouped_mma_supported(D, I), std::string(what) + ": D and I must be multiples of 32");
  HYPIC_CUDA_REQUIRE(reinterpret_cast<uintptr_t>(in) % 16 == 0, std::string(what) + ": input must be 16-byte aligned");
  HYPIC_CUDA_REQUIRE(slots > 0 && slots <= 65535, std::string(what) + ": bad slot count");
}

}  // namespace

bool moe_grouped_mma_supported(int64_t D, int64_t I) {
  return D > 0 && I > 0 && D % 32 == 0 && I % 32 == 0 && D < (int64_t{1} << 30) && I < (int64_t{1} << 30);
}

void moe_grouped_gate_up_mma(const bf16* xs, int64_t D, const int32_t* offsets, const int32_t* experts,
                             int64_t slots, const bf16* gate_up, int64_t I, bf16* act, cudaStream_t stream,
                             const int32_t* src_rows) {
  check_args(xs, D, I, slots, "moe_grouped_gate_up_mma");
  const dim3 grid(unsigned((I + 16 * kWarps - 1) / (16 * kWarps)), unsigned(slots));
  expert_kernel<true><<<grid, kThreads, 0, stream>>>(xs, int(D), src_rows, offsets, experts, gate_up, int(I), act);
  HYPIC_CUDA_CHECK(cudaGetLastError());
}

void moe_grouped_down_mma(const bf16* act, int64_t I, const int32_t* offsets, const int32_t* experts,
                          int64_t slots, const bf16* down, int64_t D, bf16* ys, cudaStream_t stream) {
  check_args(act, D, I, slots, "moe_grouped_down_mma");
  const dim3 grid(unsigned((D + 16 * kWarps - 1) / (16 * kWarps)), unsigned(slots));
  expert_kernel<false><<<grid, kThreads, 0, stream>>>(act, int(I), nullptr, offsets, experts, down, int(D), ys);
  HYPIC_CUDA_CHECK(cudaGetLastError());
}

}  // namespace hypic::cuda
