// Recurrent Gated DeltaNet for decode. One block per (column block of 32 state columns, head, sequence);
// warp w holds state rows [32w, 32w + 32) of the block's columns in registers (lane = column), so the
// state is read and written once per call and every access is a coalesced 128-byte row segment.
#include "kernels/cuda/check.h"
#include "kernels/cuda/delta_rule.h"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/env_switch.h"
#include "kernels/cuda/gdn_conv_step.cuh"
#include "kernels/cuda/pdl_launch.cuh"

namespace hypic::cuda {
namespace {

constexpr int kWarps = 4;
constexpr int kRows = 32;  // state rows per warp: dk <= kWarps * kRows = 128

// One token's update of the block's state columns (reg: this thread's rows of its column, lane = column) from
// q and k in shared memory (qs, ks: kWarps * kRows floats, 0 past dk, written before a block barrier), the
// decay a = exp(g), beta b and this column's value vt. Returns the column's output in warp 0 (the other warps'
// return value is meaningless); ends on a block barrier, after which part[], qs and ks may be rewritten.
__device__ __forceinline__ float token_update(float (&reg)[kRows], const float* qs, const float* ks,
                                              float (*part)[32], float a, float b, float vt, int warp, int lane) {
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
  float os = 0.0f;
  if (warp == 0) {
#pragma unroll
    for (int w = 0; w < kWarps; ++w) os += part[w][lane];
  }
  __syncthreads();
  return os;
}

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
    const float vt = col_ok ? __bfloat162float(v[(tok * H + h) * dv + c]) : 0.0f;
    const float os = token_update(reg, qs, ks, part, a, b, vt, warp, lane);
    if (warp == 0 && out != nullptr && col_ok) out[(tok * H + h) * dv + c] = __float2bfloat16_rn(os);
  }
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    const int i = warp * kRows + r;
    if (col_ok && i < dk) S[int64_t(i) * dv + c] = reg[r];
  }
}


// One token a row (decode): the layer's causal conv of the q, k and v channels a block needs, the split's l2 norms
// of q and k, and the recurrent step: gdn_conv_split_rows then gdn_recurrent in one launch, bit for bit. Blocks as
// gdn_recurrent_kernel's. Every block of a key head (the dv / 32 column blocks of each of its H / Hk value heads)
// convolves the head's q and k channels itself, and the last of them to arrive on the row's and key head's counter
// (which it sets back to zero) advances those channels' tails, once every block has read them; each block advances
// its own 32 value channels' tails. KC: the conv's width where it is known at compile time (its taps and tails then
// take that many registers), else 0 (K).
template <int KC>
__global__ void __launch_bounds__(kWarps * 32)
    gdn_conv_recurrent_kernel(const bf16* __restrict__ qkv, int Hk, int dk, int H, int dv, const bf16* __restrict__ w,
                              int Kr, bf16* tail1, bf16* const* __restrict__ tails, float q_scale, float eps,
                              const float* __restrict__ g, const float* __restrict__ beta, float* state,
                              float* const* __restrict__ states, bf16* __restrict__ out, int32_t* arrivals,
                              int early) {
  if (early == 2) detail::pdl_trigger();  // the successor's blocks may read their weights during the products
  __shared__ float cq[kWarps * kRows], ck[kWarps * kRows];  // q and k after the conv, before their norms
  __shared__ float qs[kWarps * kRows], ks[kWarps * kRows];  // normed (warp w writes and reads rows 32 w ..)
  __shared__ float part[kWarps][32];
  __shared__ int last;
  const int K = KC > 0 ? KC : Kr;
  const int t = threadIdx.x, warp = t / 32, lane = t % 32;
  const int64_t n = blockIdx.z, h = blockIdx.y, kh = h / (H / Hk);
  const int c = blockIdx.x * 32 + lane;
  const bool col_ok = c < dv, qk = t < dk;
  const int64_t key_dim = int64_t(Hk) * dk, C = 2 * key_dim + int64_t(H) * dv;
  const int64_t chq = kh * dk + t, chk = key_dim + chq, chv = 2 * key_dim + h * dv + c;
  // Before the wait: the state, the taps and the tails (the launches before this one in the step write none of them).
  bf16* tail = tails ? tails[n] : tail1;
  float* S = (states ? states[n] : state + n * H * dk * dv) + h * dk * dv;
  float reg[kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    const int i = warp * kRows + r;
    reg[r] = (col_ok && i < dk) ? S[int64_t(i) * dv + c] : 0.0f;
  }
  detail::ConvTaps tq{}, tk{}, tv{};
  if (qk) tq = detail::conv_taps(tail, C, chq, w, K), tk = detail::conv_taps(tail, C, chk, w, K);
  if (col_ok) tv = detail::conv_taps(tail, C, chv, w, K);
  detail::pdl_wait();  // the product before writes qkv, g and beta
  if (early == 1) detail::pdl_trigger();
  const bf16* x = qkv + n * C;
  const bf16 zero = __float2bfloat16_rn(0.0f);
  const bf16 xq = qk ? x[chq] : zero, xk = qk ? x[chk] : zero, xv = col_ok ? x[chv] : zero;
  const float a = expf(g[n * H + h]), b = beta[n * H + h];
  cq[t] = qk ? detail::conv_apply(tq, K, xq) : 0.0f;
  ck[t] = qk ? detail::conv_apply(tk, K, xk) : 0.0f;
  const float vt = col_ok ? detail::conv_apply(tv, K, xv) : 0.0f;
  __syncthreads();  // every channel's conv; every read of the q and k tails is done
  int old = 0;
  if (t == 0) {
    __threadfence();
    old = atomicAdd(arrivals + n * Hk + kh, 1);
  }
  // The norms as gdn_conv_split_rows forms them (lane-strided sums, the butterfly), in every warp alike; then this
  // warp's rows of q and k.
  float sq = 0.0f, sk = 0.0f;
  for (int i = lane; i < dk; i += 32) sq += cq[i] * cq[i];
  for (int i = lane; i < dk; i += 32) sk += ck[i] * ck[i];
  sq = detail::warp_sum(sq);
  sk = detail::warp_sum(sk);
  const float fq = q_scale / sqrtf(sq + eps), fk = 1.0f / sqrtf(sk + eps);
  qs[t] = qk ? __bfloat162float(__float2bfloat16_rn(cq[t] * fq)) : 0.0f;
  ks[t] = qk ? __bfloat162float(__float2bfloat16_rn(ck[t] * fk)) : 0.0f;
  __syncwarp();
  const float os = token_update(reg, qs, ks, part, a, b, vt, warp, lane);
  if (warp == 0 && out != nullptr && col_ok) out[(n * H + h) * dv + c] = __float2bfloat16_rn(os);
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    const int i = warp * kRows + r;
    if (col_ok && i < dk) S[int64_t(i) * dv + c] = reg[r];
  }
  if (warp == 0 && col_ok) detail::conv_advance(tail, C, chv, tv, K, xv);
  if (t == 0) {
    last = old == int(gridDim.x) * (H / Hk) - 1;
    if (last) arrivals[n * Hk + kh] = 0;  // every block of the group has arrived: none reads it again in this launch
    __threadfence();
  }
  __syncthreads();
  if (last && qk) {
    detail::conv_advance(tail, C, chq, tq, K, xq);
    detail::conv_advance(tail, C, chk, tk, K, xk);
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

void gdn_conv_recurrent_rows(const bf16* qkv, int64_t N, int64_t Hk, int64_t dk, int64_t Hv, int64_t dv,
                             const bf16* conv_w, int64_t K, bf16* tail, bf16* const* tails, float q_scale, float eps,
                             const float* g, const float* beta, float* state, float* const* states, bf16* out,
                             int32_t* arrivals, cudaStream_t stream) {
  HYPIC_CUDA_REQUIRE(Hk > 0 && Hv > 0 && Hv % Hk == 0 && Hv <= 65535, "gdn_conv_recurrent_rows: Hv must be a multiple of Hk");
  HYPIC_CUDA_REQUIRE(dk > 0 && dk <= kWarps * kRows && dv > 0 && K >= 2 && K <= detail::kConvStepMaxK,
                     "gdn_conv_recurrent_rows: needs dk in [1, 128] and 2 <= K <= 8");
  HYPIC_CUDA_REQUIRE(N >= 0 && N <= 65535 && (tails || (tail && N <= 1)) && (states || state) && arrivals,
                     "gdn_conv_recurrent_rows: a tail and a state per row, and the arrival counters");
  if (N == 0) return;
  const dim3 grid(unsigned((dv + 31) / 32), unsigned(Hv), unsigned(N));
  const bool pdl = detail::pdl_chain_enabled();
  // Where it lets its successor start early: after its wait, or (HYPIC_CUDA_GDN_REC_TRIGGER_FIRST=1, A/B runs; the
  // batch-1 step unchanged on an H100) at its start, so that the output product's blocks come while the input
  // products still stream.
  const int early = detail::pdl_trigger_early(int64_t(grid.x) * grid.y * grid.z)
                        ? (env_is("HYPIC_CUDA_GDN_REC_TRIGGER_FIRST", "1") ? 2 : 1)
                        : 0;
  detail::launch_pdl(pdl, K == 4 ? gdn_conv_recurrent_kernel<4> : gdn_conv_recurrent_kernel<0>, grid, dim3(kWarps * 32), 0, stream, qkv, int(Hk), int(dk),
                     int(Hv), int(dv), conv_w, int(K), tail, tails, q_scale, eps, g, beta, state, states, out, arrivals,
                     early);
}

}  // namespace hypic::cuda
