#include <cuda_bf16.h>

#include "kernels/cuda/check.h"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/env_switch.h"
#include "kernels/cuda/gemv.h"
#include "kernels/cuda/pdl_launch.cuh"
#include "kernels/cuda/row_norm8.cuh"

namespace hypic::cuda {
namespace {

// 8 warps; the normed prologue keeps rmsnorm_wide_kernel's layout (256 threads, 16 strided elements each)
// so that its sum of squares, and so the row, come out bit for bit the same.
constexpr int kThreads = 256, kWarps = kThreads / 32, kNormPer = 16;
constexpr int kPreload = 16;  // 16-byte pieces of a row each lane holds before the wait: K <= 4096

struct Params {
  GemvTarget t[kGemvMaxTargets];
  int64_t begin[kGemvMaxTargets + 1];  // each target's first row slot, multiples of the slots per warp
  int n = 0;
  int K = 0;
  GemvInput in;
};

// A warp owns R consecutive row slots of one target (targets start on multiples of R, so a SwiGLU gate
// row and its up row, slots 2m and 2m + 1, land in the same warp). Slots past a target's end read its row 0
// and are dropped, which keeps the load loop free of branches.
// Pre: the rows go to registers before the wait, kPreload / R pieces of each (whole rows of up to 2048 for
// R == 2); otherwise (R > 1) their first 2 KB head for L2. R == 1 always preloads.
template <int R, bool Pre>
__global__ void __launch_bounds__(kThreads) gemv_kernel(const Params p) {
  detail::pdl_trigger();
  extern __shared__ uint4 smem_u4[];
  bf16* xs = reinterpret_cast<bf16*>(smem_u4);
  const int K = p.K;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t s0 = (int64_t(blockIdx.x) * kWarps + warp) * R;
  const bool active = s0 < p.begin[p.n];
  int j = 0;
  while (active && s0 >= p.begin[j + 1]) ++j;
  const GemvTarget& t = p.t[j];
  const bool swiglu = t.epilogue == GemvEpilogue::SwiGlu;
  const int64_t slots = swiglu ? 2 * t.rows : t.rows;
  const bf16* w[R];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const int64_t s = s0 - p.begin[j] + r;
    int64_t row = 0;
    if (s < slots) row = swiglu ? (s % 2) * t.rows + s / 2 : s;
    w[r] = t.w + row * K;
  }
  // Weights are constant, so they are read before waiting on the kernel before this one (programmatic
  // launch: this grid may start while that one finishes): kPreload pieces a lane go straight to registers
  // (Pre), otherwise the first 2 KB of each row head for L2.
  constexpr int PR = (R == 1 || Pre) ? kPreload / R : 0;  // pieces of each row preloaded
  uint4 pre[R][PR > 0 ? PR : 1];
  if (active) {
    if constexpr (PR > 0) {
#pragma unroll
      for (int q = 0; q < PR; ++q) {
        const int c = lane * 8 + q * 256;
#pragma unroll
        for (int r = 0; r < R; ++r)
          if (c < K) pre[r][q] = __ldcs(reinterpret_cast<const uint4*>(w[r] + c));
      }
    } else {
#pragma unroll
      for (int r = 0; r < R; ++r)
        if (lane * 64 < K && lane < 16) asm volatile("prefetch.global.L2 [%0];" ::"l"(w[r] + lane * 64));
    }
  }
  // The norm's weights are constant too: brought into L1 before the wait (not into registers, which
  // would cost the products occupancy), off the prologue's chain of round trips.
  if (p.in.h && threadIdx.x % 32 == 0) {
#pragma unroll
    for (int k = 0; k < kNormPer; ++k) {
      const int i = threadIdx.x + k * kThreads;
      if (i < K) asm volatile("prefetch.global.L1 [%0];" ::"l"(p.in.norm_w + i));
    }
  }
  detail::pdl_wait();
  if (p.in.h) {
    __shared__ float part[kWarps];
    float v[kNormPer];
    float ss = 0;
#pragma unroll
    for (int k = 0; k < kNormPer; ++k) {
      const int i = threadIdx.x + k * kThreads;
      v[k] = i < K ? p.in.h[i] : 0.0f;
      ss += v[k] * v[k];
    }
    ss = detail::warp_sum(ss);
    if (threadIdx.x % 32 == 0) part[threadIdx.x / 32] = ss;
    __syncthreads();
    float tot = 0;
#pragma unroll
    for (int i = 0; i < kWarps; ++i) tot += part[i];
    const float inv = rsqrtf(tot / K + p.in.eps);
    const bool zc = p.in.zero_centred;
#pragma unroll
    for (int k = 0; k < kNormPer; ++k) {
      const int i = threadIdx.x + k * kThreads;
      if (i < K) {
        const float w = p.in.norm_w[i];
        const bf16 x = __float2bfloat16_rn(v[k] * inv * (zc ? 1.0f + w : w));
        xs[i] = x;
        if (p.in.x_out && blockIdx.x == 0) p.in.x_out[i] = x;
      }
    }
  } else if (p.in.gated_o) {
    // Eight elements a lane, head_dim / 8 lanes a head (K % 256 == 0: every lane of a warp has a head).
    const int hd = int(p.in.head_dim);
    for (int c = threadIdx.x * 8; c < K; c += kThreads * 8) {
      float ov[8], zv[8];
      detail::bf16x8_to_float(*reinterpret_cast<const uint4*>(p.in.gated_o + c), ov);
      detail::bf16x8_to_float(*reinterpret_cast<const uint4*>(p.in.gated_z + c), zv);
      const float inv = detail::gated_inv8(ov, hd, p.in.eps);
      *reinterpret_cast<uint4*>(xs + c) = detail::gated_out8(ov, zv, inv, p.in.norm_w + c % hd);
    }
  } else if (p.in.sig_x) {
    const int hd = int(p.in.head_dim);
    for (int c = threadIdx.x * 8; c < K; c += kThreads * 8)
      *reinterpret_cast<uint4*>(xs + c) = detail::sigmoid_mul8(
          *reinterpret_cast<const uint4*>(p.in.sig_x + c),
          *reinterpret_cast<const uint4*>(p.in.sig_gate + int64_t(c / hd) * p.in.gate_ld + c % hd));
  } else {
    for (int c = threadIdx.x * 8; c < K; c += kThreads * 8)
      *reinterpret_cast<uint4*>(xs + c) = *reinterpret_cast<const uint4*>(p.in.x + c);
  }
  __syncthreads();
  if (!active) return;
  float acc[R];
#pragma unroll
  for (int r = 0; r < R; ++r) acc[r] = 0.0f;
  int c0 = lane * 8;
  if constexpr (PR > 0) {  // the same column order as the loop below: the same sums
#pragma unroll
    for (int q = 0; q < PR; ++q) {
      const int c = lane * 8 + q * 256;
      if (c < K) {
        const uint4 xv = *reinterpret_cast<const uint4*>(xs + c);
#pragma unroll
        for (int r = 0; r < R; ++r) acc[r] = detail::dot8_bf16(pre[r][q], xv, acc[r]);
      }
    }
    c0 += PR * 256;
  }
#pragma unroll 8
  for (int c = c0; c < K; c += 256) {
    const uint4 xv = *reinterpret_cast<const uint4*>(xs + c);
    uint4 wv[R];
#pragma unroll
    for (int r = 0; r < R; ++r) wv[r] = __ldcs(reinterpret_cast<const uint4*>(w[r] + c));
#pragma unroll
    for (int r = 0; r < R; ++r) acc[r] = detail::dot8_bf16(wv[r], xv, acc[r]);
  }
#pragma unroll
  for (int r = 0; r < R; ++r) acc[r] = detail::warp_sum(acc[r]);  // every lane holds every sum

  const int64_t base = s0 - p.begin[j];
  if (swiglu) {
#pragma unroll
    for (int m = 0; m < R / 2; ++m) {
      const int64_t n = base / 2 + m;
      if (lane == m && n < t.rows) {
        const float g = detail::round_bf16(acc[2 * m]), u = detail::round_bf16(acc[2 * m + 1]);
        static_cast<bf16*>(t.y)[n] = __float2bfloat16_rn(detail::silu_f(g) * u);
      }
    }
    return;
  }
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const int64_t n = base + r;
    if (lane != r || n >= t.rows) continue;
    switch (t.epilogue) {
      case GemvEpilogue::Store:
        if (t.yt == DType::F32)
          static_cast<float*>(t.y)[n] = acc[r];
        else
          static_cast<bf16*>(t.y)[n] = __float2bfloat16_rn(acc[r]);
        break;
      case GemvEpilogue::Add:
        static_cast<float*>(t.y)[n] += acc[r];
        break;
      case GemvEpilogue::MoeResidual: {
        const float s = t.gate ? detail::sigmoid_f(*t.gate) : 1.0f;
        const float v = __bfloat162float(t.routed[n]) + s * detail::round_bf16(acc[r]);
        static_cast<float*>(t.y)[n] += v;
        break;
      }
      case GemvEpilogue::GdnGates: {
        const int64_t H = t.rows / 2;
        if (n < H) {
          static_cast<float*>(t.y)[n] = detail::sigmoid_f(acc[r]);
        } else {
          const int64_t jj = n - H;
          const float a = acc[r] + t.dt_bias[jj];
          const float sp = a > 20.0f ? a : log1pf(expf(a));
          t.g_out[jj] = -expf(t.a_log[jj]) * sp;
        }
        break;
      }
      default:
        break;
    }
  }
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

}  // namespace

bool gemv_gated_input_fits(int64_t K, int64_t head_dim, const void* o, const void* z, const float* norm_w) {
  return K > 0 && K % 256 == 0 && K <= kGemvMaxK && head_dim >= 8 && head_dim <= 256 &&
         (head_dim & (head_dim - 1)) == 0 && K % head_dim == 0 && o && z && norm_w && aligned16(o) && aligned16(z) &&
         aligned16(norm_w);
}

bool gemv_sigmoid_input_fits(int64_t K, int64_t head_dim, int64_t gate_ld, const void* x, const void* gate) {
  return K > 0 && K % 8 == 0 && K <= kGemvMaxK && head_dim > 0 && head_dim % 8 == 0 && K % head_dim == 0 &&
         gate_ld >= head_dim && gate_ld % 8 == 0 && x && gate && aligned16(x) && aligned16(gate);
}

void gemv(const GemvInput& in, int64_t K, const GemvTarget* targets, int n_targets, cudaStream_t stream,
          int rows_per_warp) {
  HYPIC_CUDA_REQUIRE(targets && n_targets >= 1 && n_targets <= kGemvMaxTargets, "gemv: 1 to 4 targets");
  HYPIC_CUDA_REQUIRE(K > 0 && K % 8 == 0 && K <= kGemvMaxK, "gemv: K must be a positive multiple of 8 up to 8192");
  const bool normed = in.h != nullptr;
  if (in.sig_x) {
    HYPIC_CUDA_REQUIRE(!normed && !in.gated_o && gemv_sigmoid_input_fits(K, in.head_dim, in.gate_ld, in.sig_x, in.sig_gate),
                       "gemv: a sigmoid-gated input needs a head dim and gate stride that are multiples of 8, K a "
                       "multiple of the head dim, 16-byte aligned rows");
  } else if (in.gated_o) {
    HYPIC_CUDA_REQUIRE(!normed && gemv_gated_input_fits(K, in.head_dim, in.gated_o, in.gated_z, in.norm_w),
                       "gemv: a gated input needs K % 256 == 0, a power-of-two head dim in [8, 256] dividing K, "
                       "16-byte aligned o, z and norm weights");
  } else {
    HYPIC_CUDA_REQUIRE(normed ? (in.norm_w && K >= 1024 && K <= int64_t{kThreads} * kNormPer)
                              : (in.x && aligned16(in.x)),
                       "gemv: a normed input needs norm weights and 1024 <= K <= 4096; a plain one a 16-byte aligned x");
  }
  // Rows per warp by the number of rows, from hypic_bench_kernels --only gemv on the H200 at the 35B-A3B
  // decode shapes: one per warp up to ~12k rows (the output projections: 2048 rows of 4096, 1.2-1.7x
  // faster than more), four for the GDN input projections (12352 rows: 1.1x), two for the LM head
  // (248k rows, where the register preload of one row per warp costs occupancy: 1.17x); a SwiGLU pair
  // needs two.
  bool any_swiglu = false;
  int64_t slots = 0;
  for (int j = 0; j < n_targets; ++j) {
    const bool sw = targets[j].epilogue == GemvEpilogue::SwiGlu;
    any_swiglu = any_swiglu || sw;
    slots += sw ? 2 * targets[j].rows : targets[j].rows;
  }
  int R = slots < 12288 ? 1 : (slots <= 65536 ? 4 : 2);
  if (any_swiglu && R == 1) R = 2;
  if (rows_per_warp != 0) {
    HYPIC_CUDA_REQUIRE(rows_per_warp == 1 || rows_per_warp == 2 || rows_per_warp == 4, "gemv: 1, 2 or 4 rows per warp");
    HYPIC_CUDA_REQUIRE(!any_swiglu || rows_per_warp >= 2, "gemv: a SwiGlu target needs 2 or 4 rows per warp");
    R = rows_per_warp;
  }
  Params p;
  p.n = n_targets;
  p.K = static_cast<int>(K);
  p.in = in;
  int64_t slot = 0;
  for (int j = 0; j < p.n; ++j) {
    const GemvTarget& t = targets[j];
    HYPIC_CUDA_REQUIRE(t.w && aligned16(t.w) && t.y && t.rows > 0,
                       "gemv: each target needs aligned weights and an output");
    const bool f32 = t.yt == DType::F32, b16 = t.yt == DType::BF16;
    switch (t.epilogue) {
      case GemvEpilogue::Store:
        HYPIC_CUDA_REQUIRE(f32 || b16, "gemv: Store writes fp32 or bf16");
        break;
      case GemvEpilogue::Add:
        HYPIC_CUDA_REQUIRE(f32, "gemv: Add accumulates into fp32");
        break;
      case GemvEpilogue::SwiGlu:
        HYPIC_CUDA_REQUIRE(b16, "gemv: SwiGlu writes bf16");
        break;
      case GemvEpilogue::MoeResidual:
        HYPIC_CUDA_REQUIRE(f32 && t.routed, "gemv: MoeResidual adds the routed output into fp32");
        break;
      case GemvEpilogue::GdnGates:
        HYPIC_CUDA_REQUIRE(f32 && t.rows % 2 == 0 && t.a_log && t.dt_bias && t.g_out,
                           "gemv: GdnGates needs 2H rows, a_log, dt_bias and g_out, beta in fp32");
        break;
    }
    p.t[j] = t;
    p.begin[j] = slot;
    const int64_t slots = t.epilogue == GemvEpilogue::SwiGlu ? 2 * t.rows : t.rows;
    slot += (slots + R - 1) / R * R;
  }
  p.begin[p.n] = slot;
  const int64_t blocks = (slot / R + kWarps - 1) / kWarps;
  HYPIC_CUDA_REQUIRE(blocks <= 2147483647, "gemv: too many rows");
  // Several rows a warp preload into registers where the grid is at most a block an SM (the router and
  // shared expert's 1281 rows at 35B-A3B: 81 blocks), so that only the norm and the sums follow the wait
  // (the batch-1 step 1.6% faster on an H100); a larger grid keeps its occupancy (the LM head).
  // HYPIC_CUDA_GEMV_PRELOAD=0: never (A/B runs).
  const bool pre = R > 1 && blocks <= detail::device_sm_count() && !env_is("HYPIC_CUDA_GEMV_PRELOAD", "0");
  // Launched programmatically (the kernel waits on its predecessor itself, after reading its weights).
  auto* kernel = R == 4 ? (pre ? gemv_kernel<4, true> : gemv_kernel<4, false>)
                 : R == 2 ? (pre ? gemv_kernel<2, true> : gemv_kernel<2, false>)
                          : gemv_kernel<1, true>;
  detail::launch_pdl(true, kernel, dim3(unsigned(blocks)), dim3(kThreads), static_cast<size_t>(K) * sizeof(bf16),
                     stream, p);
}

}  // namespace hypic::cuda
