// Recurrent Gated DeltaNet for decode. One block per (column block of 32 state columns, head, sequence);
// warp w holds state rows [32w, 32w + 32) of the block's columns in registers (lane = column), so the
// state is read and written once per call and every access is a coalesced 128-byte row segment.
#include "kernels/cuda/check.h"
#include "kernels/cuda/delta_rule.h"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/pdl_launch.cuh"

namespace hypic::cuda {
namespace {

constexpr int kWarps = 4;
constexpr int kRows = 32;  // state rows per warp: dk <= kWarps * kRows = 128

__global__ void __launch_bounds__(kWarps * 32)
    gdn_recurrent_kernel(GdnShape s, const bf16* __restrict__ q, const bf16* __restrict__ k, const bf16* __restrict__ v,
                         const float* __restrict__ g, const float* __restrict__ beta, float* state,
                         float* const* __restrict__ states, bf16* __restrict__ out, bool early) {
  // Launched programmatically in a decode step: the state and inputs are the kernels before's. Once they
  // are done, the output product (cuda::gemv, its weights read before its own wait) may start.
  detail::pdl_wait();
  if (early) detail::pdl_trigger();
  __shared__ float qs[kWarps * kRows], ks[kWarps * kRows];
  __shared__ float part[kWarps][32];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t n = blockIdx.z, h = blockIdx.y;
  const int dk = int(s.dk), dv = int(s.dv);
  const int c = blockIdx.x * 32 + lane;
  const bool col_ok = c < dv;
  const int64_t H = s.H, Hk = s.Hk, kh = h / (H / Hk), T = s.T;
  float* S = (states ? states[n] : state + n * H * dk * dv) + h * dk * dv;
  float reg[kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    const int i = warp * kRows + r;
    reg[r] = (col_ok && i < dk) ? S[int64_t(i) * dv + c] : 0.0f;
  }
  for (int64_t t = 0; t < T; ++t) {
    const int64_t tok = n * T + t;
    for (int i = threadIdx.x; i < kWarps * kRows; i += blockDim.x) {
      ks[i] = i < dk ? __bfloat162float(k[(tok * Hk + kh) * dk + i]) : 0.0f;
      qs[i] = i < dk ? __bfloat162float(q[(tok * Hk + kh) * dk + i]) : 0.0f;
    }
    __syncthreads();
    const float a = expf(g[tok * H + h]), b = beta[tok * H + h];
    // mem = (a S)^T k, reduced over the 4 warps' row ranges.
    float m = 0.0f;
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      reg[r] *= a;
      m += reg[r] * ks[warp * kRows + r];
    }
    part[warp][lane] = m;
    __syncthreads();
    float mem = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) mem += part[w][lane];
    const float vt = col_ok ? __bfloat162float(v[(tok * H + h) * dv + c]) : 0.0f;
    const float u = (vt - mem) * b;
    float o = 0.0f;
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      reg[r] += ks[warp * kRows + r] * u;
      o += reg[r] * qs[warp * kRows + r];
    }
    __syncthreads();  // everyone has read part[] (mem) before it is reused for o
    part[warp][lane] = o;
    __syncthreads();
    if (warp == 0 && out != nullptr && col_ok) {
      float os = 0.0f;
#pragma unroll
      for (int w = 0; w < kWarps; ++w) os += part[w][lane];
      out[(tok * H + h) * dv + c] = __float2bfloat16_rn(os);
    }
    __syncthreads();  // part[], ks, qs are rewritten by the next token
  }
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    const int i = warp * kRows + r;
    if (col_ok && i < dk) S[int64_t(i) * dv + c] = reg[r];
  }
}

}  // namespace

void gdn_recurrent(const GdnShape& s, const bf16* q, const bf16* k, const bf16* v, const float* g, const float* beta,
                   float* state, bf16* out, cudaStream_t stream, float* const* states) {
  HYPIC_CUDA_REQUIRE(s.H > 0 && s.Hk > 0 && s.H % s.Hk == 0, "gdn_recurrent: H must be a multiple of Hk");
  HYPIC_CUDA_REQUIRE(s.dk > 0 && s.dk <= kWarps * kRows, "gdn_recurrent: key dim must be in [1, 128]");
  HYPIC_CUDA_REQUIRE(s.dv > 0 && s.N >= 1 && s.N <= 65535 && s.H <= 65535, "gdn_recurrent: bad shape");
  if (s.T == 0) return;
  const dim3 grid(unsigned((s.dv + 31) / 32), unsigned(s.H), unsigned(s.N));
  const bool pdl = detail::pdl_chain_enabled();
  detail::launch_pdl(pdl, gdn_recurrent_kernel, grid, dim3(kWarps * 32), 0, stream, s, q, k, v, g, beta, state, states,
                     out, detail::pdl_trigger_early(int64_t(grid.x) * grid.y * grid.z));
}

}  // namespace hypic::cuda
