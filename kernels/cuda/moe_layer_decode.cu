#include "kernels/cuda/moe_layer_decode.h"

#include <map>
#include <mutex>
#include <tuple>

#include "kernels/cuda/check.h"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/mma.cuh"
#include "kernels/cuda/moe_route.cuh"
#include "kernels/cuda/pdl_launch.cuh"
#include "kernels/cuda/smem_limit.h"

namespace hypic::cuda {
namespace {

constexpr int kWarps = 16, kThreads = kWarps * 32;
// cuda::gemv's normed prologue: 256 threads, 16 strided elements each, so that the sum of squares (and the
// normed row) come out bit for bit the same.
constexpr int kNormThreads = 256, kNormPer = 16;
constexpr int kMaxPieces = 8;  // 16-byte pieces of a row a lane holds (D <= 2048)
constexpr int kMaxK = 32;

// Every block arrives, then waits until the count reaches the next multiple of the grid: the count only
// grows, so consecutive barriers and launches need no reset. The fences make each block's writes before the
// barrier visible to every block after it (the readers use L2 loads).
__device__ __forceinline__ void grid_barrier(unsigned long long* count, unsigned long long blocks) {
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();
    const unsigned long long old = atomicAdd(count, 1ull);
    const unsigned long long target = (old / blocks + 1) * blocks;
    unsigned long long now = 0;
    do {
      asm volatile("ld.acquire.gpu.global.u64 %0, [%1];" : "=l"(now) : "l"(count) : "memory");
    } while (now < target);
    __threadfence();
  }
  __syncthreads();
}

// Block b, warp w: first-phase row task and down row w * P + b (P blocks), so that consecutive rows land on
// different SMs. Dynamic shared memory: the normed row [D], the activations [K*I + Is] (bf16), then each
// warp's down row as [pieces][32 lanes] 16-byte pieces (a lane reads back only what it copied).
template <int PerLane>
__global__ void __launch_bounds__(kThreads, 1) moe_layer_decode_kernel(const MoeLayerDecodeArgs a) {
  extern __shared__ uint4 smem_u4[];
  __shared__ float part[kWarps];
  __shared__ int32_t sid[kMaxK];
  __shared__ float swt[kMaxK];
  const int D = int(a.D), E = int(a.E), K = int(a.K), I = int(a.I), Is = int(a.Is);
  const int KI = K * I, per = I / 256, routed = K * per, pieces = routed + Is / 256, npc = D / 256;
  bf16* xs = reinterpret_cast<bf16*>(smem_u4);
  bf16* as = xs + D;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int P = int(gridDim.x), b = int(blockIdx.x);
  const int n = warp * P + b;  // this warp's down row
  const bool has_row = n < D;
  uint4* my_rows = smem_u4 + (D + KI + Is) / 8 + int64_t(warp) * pieces * 32;

  // Before the wait: what no earlier kernel writes. The shared expert's down row goes to shared memory.
  if (has_row)
    for (int q = routed; q < pieces; ++q)
      detail::cp_async_16(my_rows + q * 32 + lane, a.shared_down + int64_t(n) * Is + (q - routed) * 256 + lane * 8, 16);
  detail::cp_async_commit();
  // The first phase's task: a router row, a shared gate/up pair (gemv's SwiGLU slots), or the gate row.
  const int t1 = warp * P + b, shared_end = E + Is;
  const bf16* w0 = nullptr;
  const bf16* w1 = nullptr;
  if (t1 < E) {
    w0 = a.router + int64_t(t1) * D;
  } else if (t1 < shared_end) {
    w0 = a.shared_gate_up + int64_t(t1 - E) * D;
    w1 = a.shared_gate_up + int64_t(Is + t1 - E) * D;
  } else if (t1 == shared_end && a.shared_gate_w) {
    w0 = a.shared_gate_w;
  }
  uint4 p0[kMaxPieces], p1[kMaxPieces];
#pragma unroll
  for (int q = 0; q < kMaxPieces; ++q) {
    if (q < npc && w0) p0[q] = __ldcs(reinterpret_cast<const uint4*>(w0 + lane * 8 + q * 256));
    if (q < npc && w1) p1[q] = __ldcs(reinterpret_cast<const uint4*>(w1 + lane * 8 + q * 256));
  }
  if (threadIdx.x < kNormThreads && lane == 0) {
#pragma unroll
    for (int k = 0; k < kNormPer; ++k) {
      const int i = threadIdx.x + k * kNormThreads;
      if (i < D) asm volatile("prefetch.global.L1 [%0];" ::"l"(a.norm_w + i));
    }
  }
  detail::pdl_wait();  // h: the kernel before adds the attention's output into it

  // Phase 1: the norm (gemv's layout and order), then the router, shared gate/up and gate rows.
  float v[kNormPer];
  if (threadIdx.x < kNormThreads) {
    float ss = 0;
#pragma unroll
    for (int k = 0; k < kNormPer; ++k) {
      const int i = threadIdx.x + k * kNormThreads;
      v[k] = i < D ? a.h[i] : 0.0f;
      ss += v[k] * v[k];
    }
    ss = detail::warp_sum(ss);
    if (lane == 0) part[warp] = ss;
  }
  __syncthreads();
  if (threadIdx.x < kNormThreads) {
    float tot = 0;
#pragma unroll
    for (int i = 0; i < kNormThreads / 32; ++i) tot += part[i];
    const float inv = rsqrtf(tot / D + a.eps);
#pragma unroll
    for (int k = 0; k < kNormPer; ++k) {
      const int i = threadIdx.x + k * kNormThreads;
      if (i < D) {
        const float w = a.norm_w[i];
        const bf16 x = __float2bfloat16_rn(v[k] * inv * (a.zero_centred ? 1.0f + w : w));
        xs[i] = x;
        if (b == 0) a.x[i] = x;
      }
    }
  }
  __syncthreads();
  if (w0) {
    float s0 = 0.0f, s1 = 0.0f;
#pragma unroll
    for (int q = 0; q < kMaxPieces; ++q) {
      if (q >= npc) break;
      const uint4 xv = *reinterpret_cast<const uint4*>(xs + lane * 8 + q * 256);
      s0 = detail::dot8_bf16(p0[q], xv, s0);
      if (w1) s1 = detail::dot8_bf16(p1[q], xv, s1);
    }
    s0 = detail::warp_sum(s0);
    s1 = detail::warp_sum(s1);
    if (lane == 0) {
      if (t1 < E) {
        a.logits[t1] = s0;
      } else if (t1 < shared_end) {
        const float g = detail::round_bf16(s0), u = detail::round_bf16(s1);
        a.shared_act[t1 - E] = __float2bfloat16_rn(detail::silu_f(g) * u);
      } else {
        *a.shared_gate = s0;
      }
    }
  }
  grid_barrier(a.barrier, static_cast<unsigned long long>(P));
  detail::pdl_trigger();  // every block is resident now: a successor's blocks cannot take a missing block's SM

  // Phase 2: the routing (every block for itself, as moe_decode's kernels do), the block's routed down rows
  // into shared memory, the routed gate/up rows.
  if (warp == 0) {
    int32_t id;
    float w;
    detail::route_warp<PerLane>(a.logits, E, K, a.normalize, lane, id, w);
    if (lane < K) {
      sid[lane] = id;
      swt[lane] = w;
      if (a.ids && b == 0) {
        a.ids[lane] = id;
        a.weights[lane] = w;
      }
    }
  }
  __syncthreads();
  if (has_row)
    for (int q = 0; q < routed; ++q)
      detail::cp_async_16(my_rows + q * 32 + lane,
                          a.down + (int64_t(sid[q / per]) * D + n) * I + (q % per) * 256 + lane * 8, 16);
  detail::cp_async_commit();
  const int tasks = KI, step = P * kWarps;
  for (int t = warp * P + b; t < tasks; t += step) {
    const int k = t / I, i = t % I;
    const bf16* G = a.gate_up + (int64_t(sid[k]) * 2 * I + i) * D;
    const bf16* U = G + int64_t(I) * D;
    uint4 gv[kMaxPieces], uv[kMaxPieces];
#pragma unroll
    for (int q = 0; q < kMaxPieces; ++q) {
      if (q < npc) {
        gv[q] = __ldcs(reinterpret_cast<const uint4*>(G + lane * 8 + q * 256));
        uv[q] = __ldcs(reinterpret_cast<const uint4*>(U + lane * 8 + q * 256));
      }
    }
    float g = 0.0f, u = 0.0f;  // moe_decode's gate/up sums: both rows in column order
#pragma unroll
    for (int q = 0; q < kMaxPieces; ++q) {
      if (q >= npc) break;
      const uint4 xv = *reinterpret_cast<const uint4*>(xs + lane * 8 + q * 256);
      g = detail::dot8_bf16(gv[q], xv, g);
      u = detail::dot8_bf16(uv[q], xv, u);
    }
    g = detail::warp_sum(g);
    u = detail::warp_sum(u);
    if (lane == 0) a.act[t] = __float2bfloat16_rn(detail::silu_f(g) * u);
  }
  grid_barrier(a.barrier, static_cast<unsigned long long>(P));

  // Phase 3: the activations into shared memory, then each warp's down row in moe_decode's order.
  for (int c = threadIdx.x * 8; c < KI + Is; c += kThreads * 8)
    *reinterpret_cast<uint4*>(as + c) =
        __ldcg(reinterpret_cast<const uint4*>(c < KI ? a.act + c : a.shared_act + (c - KI)));
  detail::cp_async_wait<0>();
  __syncthreads();
  if (!has_row) return;
  float acc = 0.0f, partial = 0.0f, sh = 0.0f;
  for (int q = 0; q < pieces; ++q) {
    const uint4 wq = my_rows[q * 32 + lane];
    if (q < routed) {
      const int k = q / per, c = (q % per) * 256 + lane * 8;
      partial = detail::dot8_bf16(wq, *reinterpret_cast<const uint4*>(as + int64_t(k) * I + c),
                                  q % per == 0 ? 0.0f : partial);
      if (q % per == per - 1) acc += swt[k] * partial;
    } else {
      sh = detail::dot8_bf16(wq, *reinterpret_cast<const uint4*>(as + KI + (q - routed) * 256 + lane * 8), sh);
    }
  }
  acc = detail::warp_sum(acc);
  sh = detail::warp_sum(sh);
  if (lane == 0) {
    const float s = a.shared_gate_w ? detail::sigmoid_f(__ldcg(a.shared_gate)) : 1.0f;
    a.h[n] += detail::round_bf16(acc) + s * detail::round_bf16(sh);
  }
}

size_t smem_bytes(int64_t D, int64_t K, int64_t I, int64_t Is) {
  const int64_t pieces = K * I / 256 + Is / 256;
  return size_t(2 * (D + K * I + Is) + int64_t(kWarps) * pieces * 32 * 16);
}

auto* kernel_for(int64_t E) { return E <= 256 ? moe_layer_decode_kernel<8> : moe_layer_decode_kernel<32>; }

// Raises the kernel's shared-memory limit and checks that a block fits an SM, once per (device, kernel, size).
void prepare(const void* kernel, size_t smem) {
  static std::mutex mu;
  static std::map<std::tuple<int, const void*, size_t>, bool> done;
  int dev = 0;
  HYPIC_CUDA_CHECK(cudaGetDevice(&dev));
  std::lock_guard<std::mutex> g(mu);
  bool& ok = done[{dev, kernel, smem}];
  if (ok) return;
  raise_smem_limit(kernel, smem);
  int per_sm = 0;
  HYPIC_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreads, smem));
  HYPIC_CUDA_REQUIRE(per_sm >= 1, "moe_layer_decode: a block does not fit an SM");
  ok = true;
}

}  // namespace

bool moe_layer_decode_supported(int64_t E, int64_t K, int64_t D, int64_t I, int64_t Is) {
  if (!(E > 0 && E <= detail::kRouteMaxE && K > 0 && K <= E && K <= kMaxK && D >= 1024 && D <= 256 * kMaxPieces &&
        D % 256 == 0 && I > 0 && I % 256 == 0 && Is > 0 && Is % 256 == 0))
    return false;
  const int64_t P = detail::device_sm_count();
  if (D > kWarps * P || E + Is + 1 > kWarps * P) return false;
  // Static shared memory (part, sid, swt) and a margin besides the dynamic part.
  return smem_bytes(D, K, I, Is) + 1024 <= size_t(detail::device_attribute(cudaDevAttrMaxSharedMemoryPerBlockOptin));
}

void moe_layer_decode(const MoeLayerDecodeArgs& a, cudaStream_t stream) {
  HYPIC_CUDA_REQUIRE(moe_layer_decode_supported(a.E, a.K, a.D, a.I, a.Is),
                     "moe_layer_decode: needs E <= 1024, K <= min(E, 32), 1024 <= D <= 2048 with D % 256 == 0, I "
                     "and Is multiples of 256, and its rows within 16 a warp of the SMs and their shared memory");
  HYPIC_CUDA_REQUIRE(a.h && a.norm_w && a.x && a.router && a.logits && a.shared_gate_up && a.shared_act &&
                         a.shared_down && a.gate_up && a.down && a.act && a.barrier &&
                         (!a.shared_gate_w || a.shared_gate) && (!a.ids || a.weights),
                     "moe_layer_decode: missing pointer");
  const auto u16 = [](const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; };
  HYPIC_CUDA_REQUIRE(u16(a.router) && u16(a.shared_gate_up) && u16(a.shared_down) && u16(a.gate_up) &&
                         u16(a.down) && u16(a.act) && u16(a.shared_act) && (!a.shared_gate_w || u16(a.shared_gate_w)),
                     "moe_layer_decode: weights and activations 16-byte aligned");
  auto* kernel = kernel_for(a.E);
  const size_t smem = smem_bytes(a.D, a.K, a.I, a.Is);
  prepare(reinterpret_cast<const void*>(kernel), smem);
  // One block an SM, all resident together: the barriers wait for every block.
  detail::launch_pdl(detail::pdl_chain_enabled(), kernel, dim3(unsigned(detail::device_sm_count())), dim3(kThreads),
                     smem, stream, a);
}

}  // namespace hypic::cuda
