#include "kernels/cuda/check.h"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/moe_route.cuh"
#include "kernels/cuda/moe_small.h"
#include "kernels/cuda/pdl_launch.cuh"

namespace hypic::cuda {
namespace {

// One output row per warp and many blocks: decode reads each weight once, so what matters is how many
// loads are in flight across the GPU.
constexpr int kWarps = 8, kThreads = kWarps * 32, kRowsPerWarp = 1, kRowsPerBlock = kWarps * kRowsPerWarp;
constexpr int64_t kMaxActElems = 16384;

// This lane's share of w . v over n elements (n % 8 == 0): 16-byte loads, lanes 8 elements apart.
// Weights are read once per call, so they bypass L1.
__device__ __forceinline__ float dot_partial(const __nv_bfloat16* __restrict__ w, const __nv_bfloat16* v, int n,
                                             int lane) {
  float acc = 0.0f;
#pragma unroll 4
  for (int c = lane * 8; c < n; c += 256) {
    acc = detail::dot8_bf16(__ldcs(reinterpret_cast<const uint4*>(w + c)), *reinterpret_cast<const uint4*>(v + c),
                            acc);
  }
  return acc;
}

// dot_partial of two weight rows against the same v, their loads interleaved.
__device__ __forceinline__ void dot_partial_pair(const __nv_bfloat16* __restrict__ wa,
                                                 const __nv_bfloat16* __restrict__ wb, const __nv_bfloat16* v, int n,
                                                 int lane, float& a_out, float& b_out) {
  float a = 0.0f, b = 0.0f;
#pragma unroll 4
  for (int c = lane * 8; c < n; c += 256) {
    const uint4 av = __ldcs(reinterpret_cast<const uint4*>(wa + c));
    const uint4 bv = __ldcs(reinterpret_cast<const uint4*>(wb + c));
    const uint4 xv = *reinterpret_cast<const uint4*>(v + c);
    a = detail::dot8_bf16(av, xv, a);
    b = detail::dot8_bf16(bv, xv, b);
  }
  a_out = a;
  b_out = b;
}

// Block = (16 rows of I, one routed row r = t*K + k); x_t staged in shared memory.
__global__ void __launch_bounds__(kThreads) gate_up_kernel(const __nv_bfloat16* __restrict__ x, int64_t ldx, int D,
                                                           const int32_t* __restrict__ ids, int K,
                                                           const __nv_bfloat16* __restrict__ gate_up, int I,
                                                           __nv_bfloat16* __restrict__ act) {
  extern __shared__ uint4 smem_u4[];
  __nv_bfloat16* xs = reinterpret_cast<__nv_bfloat16*>(smem_u4);
  const int64_t r = blockIdx.y, t = r / K;
  // One token: the first 2 KB of this warp's gate and up rows head for L2 while x is staged.
  if (gridDim.y == unsigned(K)) {
    const int i = blockIdx.x * kRowsPerBlock + threadIdx.x / 32 * kRowsPerWarp, lane = threadIdx.x % 32;
    if (i < I && lane < 16 && lane * 64 < D) {
      const __nv_bfloat16* G0 = gate_up + (int64_t(ids[r]) * 2 * I + i) * D + lane * 64;
      asm volatile("prefetch.global.L2 [%0];" ::"l"(G0));
      asm volatile("prefetch.global.L2 [%0];" ::"l"(G0 + int64_t(I) * D));
    }
  }
  for (int c = threadIdx.x * 8; c < D; c += kThreads * 8)
    *reinterpret_cast<uint4*>(xs + c) = *reinterpret_cast<const uint4*>(x + t * ldx + c);
  __syncthreads();
  const __nv_bfloat16* G = gate_up + int64_t(ids[r]) * 2 * I * D;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
#pragma unroll
  for (int j = 0; j < kRowsPerWarp; ++j) {
    const int i = blockIdx.x * kRowsPerBlock + warp * kRowsPerWarp + j;
    if (i >= I) break;
    // The gate and up rows in one loop, so both rows' loads are in flight together (the sums are
    // formed in the same order as two separate passes would).
    float g, u;
    dot_partial_pair(G + int64_t(i) * D, G + int64_t(I + i) * D, xs, D, lane, g, u);
    g = detail::warp_sum(g);
    u = detail::warp_sum(u);
    if (lane == 0) act[r * I + i] = __float2bfloat16_rn(detail::silu_f(g) * u);
  }
}

// Block = (8 output features, one token); the token's K activation rows staged in shared memory, with
// its experts' matrix bases and weights, so the loads of several experts' rows can be in flight together
// (read from global inside the loop, each expert id was a dependent load before its weights).
constexpr int kMaxDownK = 32, kDownPreload = 16;

__global__ void __launch_bounds__(kThreads) down_kernel(const __nv_bfloat16* __restrict__ act, int K, int I,
                                                        const int32_t* __restrict__ ids,
                                                        const float* __restrict__ weights,
                                                        const __nv_bfloat16* __restrict__ down, int D,
                                                        __nv_bfloat16* __restrict__ y) {
  detail::pdl_trigger();  // a programmatically launched successor (cuda::gemv) may start
  extern __shared__ uint4 smem_u4[];
  __nv_bfloat16* as = reinterpret_cast<__nv_bfloat16*>(smem_u4);
  __shared__ const __nv_bfloat16* base[kMaxDownK];
  __shared__ float wk[kMaxDownK];
  const int64_t t = blockIdx.y;
  const int KI = K * I;
  for (int c = threadIdx.x * 8; c < KI; c += kThreads * 8)
    *reinterpret_cast<uint4*>(as + c) = *reinterpret_cast<const uint4*>(act + t * KI + c);
  if (threadIdx.x < K) {
    base[threadIdx.x] = down + int64_t(ids[t * K + threadIdx.x]) * D * I;
    wk[threadIdx.x] = weights[t * K + threadIdx.x];
  }
  __syncthreads();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
#pragma unroll
  for (int j = 0; j < kRowsPerWarp; ++j) {
    const int n = blockIdx.x * kRowsPerBlock + warp * kRowsPerWarp + j;
    if (n >= D) break;
    float acc = 0.0f, partial = 0.0f;
    const int per = I / 256;  // 16-byte pieces per lane and expert row
    // One token (decode): latency-bound, so every piece is loaded up front; more tokens re-read shared
    // experts' rows and are better served by the plain loop's occupancy.
    if (gridDim.y == 1 && I % 256 == 0 && K * per <= kDownPreload) {
      // Every piece of the row over all K experts loaded before the first is used (the same sums, in the
      // same order, as dot_partial per expert).
      uint4 wv[kDownPreload];
#pragma unroll
      for (int q = 0; q < kDownPreload; ++q)
        if (q < K * per)
          wv[q] = __ldcs(reinterpret_cast<const uint4*>(base[q / per] + int64_t(n) * I + (q % per) * 256 + lane * 8));
#pragma unroll
      for (int q = 0; q < kDownPreload; q += 1) {
        if (q >= K * per) break;
        const int k = q / per, c = (q % per) * 256 + lane * 8;
        const uint4 xv = *reinterpret_cast<const uint4*>(as + int64_t(k) * I + c);
        partial = detail::dot8_bf16(wv[q], xv, q % per == 0 ? 0.0f : partial);
        if (q % per == per - 1) acc += wk[k] * partial;
      }
    } else {
#pragma unroll 8
      for (int k = 0; k < K; ++k) acc += wk[k] * dot_partial(base[k] + int64_t(n) * I, as + int64_t(k) * I, I, lane);
    }
    acc = detail::warp_sum(acc);
    if (lane == 0) y[t * D + n] = __float2bfloat16_rn(acc);
  }
}

// One warp: 32 experts a round, those with rows compacted in order with a ballot (a serial loop's
// dependent loads took ~20 us).
__global__ void expert_list_kernel(const int32_t* __restrict__ offsets, int E, int slots, int32_t* experts) {
  const int lane = threadIdx.x;
  int n = 0;
  for (int e0 = 0; e0 < E; e0 += 32) {
    const int e = e0 + lane;
    const bool has = e < E && offsets[e + 1] > offsets[e];
    const unsigned m = __ballot_sync(0xffffffffu, has);
    const int at = n + __popc(m & ((1u << lane) - 1u));
    if (has && at < slots) experts[at] = e;
    n += __popc(m);
  }
  for (int j = n + lane; j < slots; j += 32) experts[j] = -1;
}

// The same partial dot product with the weights through L1: an expert's row is read again for each of
// its routed rows, and those reads should hit.
__device__ __forceinline__ float dot_partial_cached(const __nv_bfloat16* __restrict__ w,
                                                    const __nv_bfloat16* __restrict__ v, int n, int lane) {
  float acc = 0.0f;
#pragma unroll 4
  for (int c = lane * 8; c < n; c += 256) {
    acc = detail::dot8_bf16(__ldg(reinterpret_cast<const uint4*>(w + c)), __ldg(reinterpret_cast<const uint4*>(v + c)),
                            acc);
  }
  return acc;
}

// Block = (8 rows of I, one routed expert); each warp one row i of the expert's gate and up projections,
// over all the expert's grouped rows.
__global__ void __launch_bounds__(kThreads) grouped_gate_up_kernel(const __nv_bfloat16* __restrict__ xs, int D,
                                                                   const int32_t* __restrict__ offsets,
                                                                   const int32_t* __restrict__ experts,
                                                                   const __nv_bfloat16* __restrict__ gate_up, int I,
                                                                   __nv_bfloat16* __restrict__ act) {
  const int e = experts[blockIdx.y];
  if (e < 0) return;
  const int i = blockIdx.x * kRowsPerBlock + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (i >= I) return;
  const __nv_bfloat16* G = gate_up + (int64_t(e) * 2 * I + i) * D;
  const __nv_bfloat16* U = G + int64_t(I) * D;
  for (int r = offsets[e]; r < offsets[e + 1]; ++r) {
    const float g = detail::warp_sum(dot_partial_cached(G, xs + int64_t(r) * D, D, lane));
    const float u = detail::warp_sum(dot_partial_cached(U, xs + int64_t(r) * D, D, lane));
    if (lane == 0) act[int64_t(r) * I + i] = __float2bfloat16_rn(detail::silu_f(g) * u);
  }
}

// Block = (32 output features, one routed expert); each warp 4 features over the expert's rows (the
// rows of the down projection are short: 4 per warp keep enough loads in flight).
constexpr int kDownRowsPerWarp = 4, kDownRowsPerBlock = kWarps * kDownRowsPerWarp;

__global__ void __launch_bounds__(kThreads) grouped_down_kernel(const __nv_bfloat16* __restrict__ act, int I,
                                                                const int32_t* __restrict__ offsets,
                                                                const int32_t* __restrict__ experts,
                                                                const __nv_bfloat16* __restrict__ down, int D,
                                                                __nv_bfloat16* __restrict__ ys) {
  const int e = experts[blockIdx.y];
  if (e < 0) return;
  const int n0 = blockIdx.x * kDownRowsPerBlock + (threadIdx.x / 32) * kDownRowsPerWarp, lane = threadIdx.x % 32;
  if (n0 >= D) return;
  const __nv_bfloat16* W = down + (int64_t(e) * D + n0) * I;
  for (int r = offsets[e]; r < offsets[e + 1]; ++r) {
    const __nv_bfloat16* a = act + int64_t(r) * I;
    float y[kDownRowsPerWarp];
#pragma unroll
    for (int j = 0; j < kDownRowsPerWarp; ++j)
      y[j] = n0 + j < D ? dot_partial_cached(W + int64_t(j) * I, a, I, lane) : 0.0f;
#pragma unroll
    for (int j = 0; j < kDownRowsPerWarp; ++j) {
      const float v = detail::warp_sum(y[j]);
      if (lane == 0 && n0 + j < D) ys[int64_t(r) * D + n0 + j] = __float2bfloat16_rn(v);
    }
  }
}

// The decode form (moe_decode): one token, its routing inside the kernels, the shared expert folded into
// the down kernel. Both kernels are launched programmatically, so each starts while the kernel before
// it finishes.
// Of the (K*I + Is) / 256 16-byte pieces of a lane's down rows (all K experts' and the shared one's), this
// many are read into registers before the wait (35B-A3B: all 18), few enough for two blocks an SM; the
// rest are read after it.
constexpr int kDecodeDownPieces = 20;
constexpr int64_t kDecodeMaxAct = 24576;  // K*I + Is activations in shared memory (48 KB)

// Block = (8 rows of I, one routed slot k). The experts come from the router logits, which (like x) the
// kernel before writes: so the wait comes first, and the trigger after it (moe_decode's down kernel reads
// the logits before its own wait, which is safe only once this grid's wait has returned in every block).
template <int PerLane>
__global__ void __launch_bounds__(kThreads, 4) decode_gate_up_kernel(const float* __restrict__ logits, int E, int K,
                                                                  bool normalize, const __nv_bfloat16* __restrict__ x,
                                                                  int D, const __nv_bfloat16* __restrict__ gate_up,
                                                                  int I, __nv_bfloat16* __restrict__ act,
                                                                  int32_t* ids_out, float* weights_out) {
  extern __shared__ uint4 smem_u4[];
  __nv_bfloat16* xs = reinterpret_cast<__nv_bfloat16*>(smem_u4);
  __shared__ int32_t sid[kMaxDownK];
  detail::pdl_wait();
  detail::pdl_trigger();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (warp == 0) {
    int32_t id;
    float w;
    detail::route_warp<PerLane>(logits, E, K, normalize, lane, id, w);
    if (lane < K) {
      sid[lane] = id;
      if (ids_out && blockIdx.x == 0 && blockIdx.y == 0) {
        ids_out[lane] = id;
        weights_out[lane] = w;
      }
    }
  }
  for (int c = threadIdx.x * 8; c < D; c += kThreads * 8)
    *reinterpret_cast<uint4*>(xs + c) = __ldcg(reinterpret_cast<const uint4*>(x + c));
  __syncthreads();
  const int i = blockIdx.x * kRowsPerBlock + warp;
  if (i >= I) return;
  const __nv_bfloat16* G = gate_up + (int64_t(sid[blockIdx.y]) * 2 * I + i) * D;
  const __nv_bfloat16* U = G + int64_t(I) * D;
  float g, u;
  dot_partial_pair(G, U, xs, D, lane, g, u);
  g = detail::warp_sum(g);
  u = detail::warp_sum(u);
  if (lane == 0) act[int64_t(blockIdx.y) * I + i] = __float2bfloat16_rn(detail::silu_f(g) * u);
}

// Block = 8 output features, warp = one. Before the wait: the shared expert's row of this warp (constant),
// the routing (every warp for itself, from the logits the gate/up kernel waited for: no barrier before
// the loads) and the K experts' rows, in registers (the first kDecodeDownPieces pieces); after it: the
// activations, the sums (in down_kernel's and gemv's orders), h[n] += bf16(routed) + gate * bf16(shared)
// as gemv's MoeResidual epilogue.
template <int PerLane>
__global__ void __launch_bounds__(kThreads, 2) decode_down_kernel(const float* __restrict__ logits, int E, int K,
                                                               bool normalize, const __nv_bfloat16* __restrict__ act,
                                                               int I, const __nv_bfloat16* __restrict__ down, int D,
                                                               const __nv_bfloat16* __restrict__ shared_act,
                                                               const __nv_bfloat16* __restrict__ shared_down, int Is,
                                                               const float* __restrict__ shared_gate,
                                                               float* __restrict__ h) {
  detail::pdl_trigger();  // a programmatically launched successor (cuda::gemv) may start
  extern __shared__ uint4 smem_u4[];
  __nv_bfloat16* as = reinterpret_cast<__nv_bfloat16*>(smem_u4);  // [K * I] routed, then [Is] shared
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int n = blockIdx.x * kRowsPerBlock + warp;
  const bool active = n < D;  // warp-uniform
  const int per = I / 256, routed = K * per, pieces = routed + Is / 256;
  uint4 wv[kDecodeDownPieces];
#pragma unroll
  for (int q = 0; q < kDecodeDownPieces; ++q)
    if (active && q >= routed && q < pieces)
      wv[q] = __ldcs(reinterpret_cast<const uint4*>(shared_down + int64_t(n) * Is + (q - routed) * 256 + lane * 8));
  int32_t id;
  float w;
  detail::route_warp<PerLane>(logits, E, K, normalize, lane, id, w);  // lane k < K: expert k and its weight
  // Piece q: expert q / per's row, its (q % per)-th 256 elements; past the routed ones, the shared row's.
  const auto piece = [&](int q) {
    const int k = min(q / per, 31), e = __shfl_sync(0xffffffffu, id, k);  // every lane takes part
    return reinterpret_cast<const uint4*>(
        q < routed ? down + (int64_t(e) * D + n) * I + (q % per) * 256 + lane * 8
                   : shared_down + int64_t(n) * Is + (q - routed) * 256 + lane * 8);
  };
#pragma unroll
  for (int q = 0; q < kDecodeDownPieces; ++q) {
    const uint4* src = piece(q);
    if (active && q < routed) wv[q] = __ldcs(src);
  }
  detail::pdl_wait();  // the routed activations (the kernel before); the shared ones and its gate are older
  for (int c = threadIdx.x * 8; c < K * I + Is; c += kThreads * 8)
    *reinterpret_cast<uint4*>(as + c) =
        __ldcg(reinterpret_cast<const uint4*>(c < K * I ? act + c : shared_act + (c - K * I)));
  __syncthreads();
  if (!active) return;
  float acc = 0.0f, partial = 0.0f, sh = 0.0f;
  const int KI = K * I;
  const auto use = [&](int q, const uint4& wq) {
    if (q < routed) {
      const int k = q / per, c = (q % per) * 256 + lane * 8;
      partial = detail::dot8_bf16(wq, *reinterpret_cast<const uint4*>(as + int64_t(k) * I + c), q % per == 0 ? 0.0f : partial);
      if (q % per == per - 1) acc += __shfl_sync(0xffffffffu, w, k) * partial;
    } else {
      sh = detail::dot8_bf16(wq, *reinterpret_cast<const uint4*>(as + KI + (q - routed) * 256 + lane * 8), sh);
    }
  };
#pragma unroll
  for (int q = 0; q < kDecodeDownPieces; ++q) {
    if (q >= pieces) break;
    use(q, wv[q]);
  }
  for (int q = kDecodeDownPieces; q < pieces; ++q) use(q, __ldcs(piece(q)));
  acc = detail::warp_sum(acc);
  sh = detail::warp_sum(sh);
  if (lane == 0) {
    const float s = shared_gate ? detail::sigmoid_f(__ldcg(shared_gate)) : 1.0f;
    h[n] += detail::round_bf16(acc) + s * detail::round_bf16(sh);
  }
}

}  // namespace

void moe_expert_list(const int32_t* offsets, int64_t E, int64_t slots, int32_t* experts, cudaStream_t stream) {
  HYPIC_CUDA_REQUIRE(E > 0 && E <= 1024 && slots > 0 && slots <= E, "moe_expert_list: bad shape");
  expert_list_kernel<<<1, 32, 0, stream>>>(offsets, int(E), int(slots), experts);
  HYPIC_CUDA_CHECK(cudaGetLastError());
}

void moe_grouped_gate_up(const bf16* xs, int64_t D, const int32_t* offsets, const int32_t* experts, int64_t slots,
                         const bf16* gate_up, int64_t I, bf16* act, cudaStream_t stream) {
  HYPIC_CUDA_REQUIRE(D % 8 == 0 && I > 0 && reinterpret_cast<uintptr_t>(xs) % 16 == 0,
                     "moe_grouped_gate_up: D must be a multiple of 8, xs 16-byte aligned");
  HYPIC_CUDA_REQUIRE(slots > 0 && slots <= 65535, "moe_grouped_gate_up: bad slot count");
  const dim3 grid(unsigned((I + kRowsPerBlock - 1) / kRowsPerBlock), unsigned(slots));
  grouped_gate_up_kernel<<<grid, kThreads, 0, stream>>>(xs, int(D), offsets, experts, gate_up, int(I), act);
  HYPIC_CUDA_CHECK(cudaGetLastError());
}

void moe_grouped_down(const bf16* act, int64_t I, const int32_t* offsets, const int32_t* experts, int64_t slots,
                      const bf16* down, int64_t D, bf16* ys, cudaStream_t stream) {
  HYPIC_CUDA_REQUIRE(I % 8 == 0 && D > 0 && reinterpret_cast<uintptr_t>(act) % 16 == 0,
                     "moe_grouped_down: I must be a multiple of 8, act 16-byte aligned");
  HYPIC_CUDA_REQUIRE(slots > 0 && slots <= 65535, "moe_grouped_down: bad slot count");
  const dim3 grid(unsigned((D + kDownRowsPerBlock - 1) / kDownRowsPerBlock), unsigned(slots));
  grouped_down_kernel<<<grid, kThreads, 0, stream>>>(act, int(I), offsets, experts, down, int(D), ys);
  HYPIC_CUDA_CHECK(cudaGetLastError());
}

void moe_small_gate_up(const bf16* x, int64_t T, int64_t ldx, int64_t D, const int32_t* ids, int64_t K,
                       const bf16* gate_up, int64_t I, bf16* act, cudaStream_t stream) {
  if (T <= 0) return;
  HYPIC_CUDA_REQUIRE(D % 8 == 0 && ldx % 8 == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0,
                     "moe_small_gate_up: D and ldx must be multiples of 8, x 16-byte aligned");
  HYPIC_CUDA_REQUIRE(K > 0 && I > 0 && T * K <= 65535, "moe_small_gate_up: needs 0 < T*K <= 65535 and I > 0");
  const dim3 grid(unsigned((I + kRowsPerBlock - 1) / kRowsPerBlock), unsigned(T * K));
  gate_up_kernel<<<grid, kThreads, size_t(D) * 2, stream>>>(x, ldx, int(D), ids, int(K), gate_up, int(I), act);
  HYPIC_CUDA_CHECK(cudaGetLastError());
}

void moe_small_down_combine(const bf16* act, int64_t T, int64_t K, int64_t I, const int32_t* ids,
                            const float* weights, const bf16* down, int64_t D, bf16* y, cudaStream_t stream) {
  if (T <= 0) return;
  HYPIC_CUDA_REQUIRE(I % 8 == 0 && K > 0 && D > 0 && reinterpret_cast<uintptr_t>(act) % 16 == 0,
                     "moe_small_down_combine: I must be a multiple of 8, act 16-byte aligned");
  HYPIC_CUDA_REQUIRE(K * I <= kMaxActElems && K <= kMaxDownK && T <= 65535,
                     "moe_small_down_combine: K*I, K or T too large");
  const dim3 grid(unsigned((D + kRowsPerBlock - 1) / kRowsPerBlock), unsigned(T));
  down_kernel<<<grid, kThreads, size_t(K * I) * 2, stream>>>(act, int(K), int(I), ids, weights, down, int(D), y);
  HYPIC_CUDA_CHECK(cudaGetLastError());
}

bool moe_decode_supported(int64_t E, int64_t K, int64_t D, int64_t I, int64_t Is) {
  return E > 0 && E <= detail::kRouteMaxE && K > 0 && K <= E && K <= kMaxDownK && D > 0 && D % 8 == 0 &&
         I > 0 && I % 256 == 0 && Is > 0 && Is % 256 == 0 && K * I + Is <= kDecodeMaxAct;
}

void moe_decode(const MoeDecodeArgs& a, cudaStream_t stream) {
  HYPIC_CUDA_REQUIRE(moe_decode_supported(a.E, a.K, a.D, a.I, a.Is),
                     "moe_decode: needs E <= 1024, K <= min(E, 32), D % 8 == 0, I and Is multiples of 256, "
                     "K*I + Is <= 24576");
  HYPIC_CUDA_REQUIRE(a.logits && a.x && a.gate_up && a.act && a.down && a.shared_act && a.shared_down && a.h &&
                         (!a.ids || a.weights),
                     "moe_decode: missing pointer");
  const auto u16 = [](const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; };
  HYPIC_CUDA_REQUIRE(u16(a.x) && u16(a.act) && u16(a.shared_act), "moe_decode: x and activations 16-byte aligned");
  // Both launched programmatically (each kernel waits on its predecessor itself).
  const bool narrow = a.E <= 256;  // 8 router logits a lane
  const int E = int(a.E), K = int(a.K), D = int(a.D), I = int(a.I), Is = int(a.Is);
  detail::launch_pdl(true, narrow ? decode_gate_up_kernel<8> : decode_gate_up_kernel<32>,
                     dim3(unsigned((a.I + kRowsPerBlock - 1) / kRowsPerBlock), unsigned(a.K)), dim3(kThreads),
                     size_t(a.D) * 2, stream, a.logits, E, K, a.normalize, a.x, D, a.gate_up, I, a.act, a.ids,
                     a.weights);
  detail::launch_pdl(true, narrow ? decode_down_kernel<8> : decode_down_kernel<32>,
                     dim3(unsigned((a.D + kRowsPerBlock - 1) / kRowsPerBlock)), dim3(kThreads),
                     size_t(a.K * a.I + a.Is) * 2, stream, a.logits, E, K, a.normalize, const_cast<const bf16*>(a.act),
                     I, a.down, D, a.shared_act, a.shared_down, Is, a.shared_gate, a.h);
}

}  // namespace hypic::cuda
