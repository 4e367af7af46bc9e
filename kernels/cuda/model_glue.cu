#include <cuda_fp16.h>

#include "kernels/cuda/check.h"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/gdn_conv_step.cuh"
#include "kernels/cuda/model_glue.h"
#include "kernels/cuda/pdl_launch.cuh"

namespace hypic::cuda {
namespace {

using detail::blocks_for;

__global__ void embed_kernel(const bf16* __restrict__ table, const int32_t* __restrict__ ids, int64_t T, int64_t D,
                             float* __restrict__ h) {
  detail::pdl_wait();
  detail::pdl_trigger();  // a programmatically launched successor (cuda::gemv) may start
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= T * D) return;
  const int64_t t = i / D, d = i % D;
  h[i] = __bfloat162float(table[int64_t(ids[t]) * D + d]);
}

__global__ void residual_add_kernel(float* __restrict__ h, const bf16* __restrict__ a, const bf16* __restrict__ b,
                                    const float* __restrict__ b_gate, int64_t T, int64_t D) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= T * D) return;
  float v = __bfloat162float(a[i]);
  if (b) v += (b_gate ? detail::sigmoid_f(b_gate[i / D]) : 1.0f) * __bfloat162float(b[i]);
  h[i] += v;
}

__global__ void gdn_gates_kernel(const float* __restrict__ ba, int64_t T, int64_t H, const float* __restrict__ A_log,
                                 const float* __restrict__ dt_bias, float* __restrict__ g, float* __restrict__ beta) {
  detail::pdl_wait();
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= T * H) return;
  const int64_t t = i / H, j = i % H;
  const float b = ba[t * 2 * H + j], a = ba[t * 2 * H + H + j] + dt_bias[j];
  const float sp = a > 20.0f ? a : log1pf(expf(a));
  beta[i] = detail::sigmoid_f(b);
  g[i] = -expf(A_log[j]) * sp;
}

// One block per token: warps l2-normalise the q and k heads, then every thread copies v. A lane sums its
// elements i = lane, lane + 32, ... in that order (conv_split_rows_kernel forms the norm the same way, bit for
// bit); up to kSplitHeld of them stay in registers for the scaled copy (dk <= 256), the rest are read again.
constexpr int kSplitHeld = 8;
__global__ void gdn_split_kernel(const bf16* __restrict__ conv, int Hk, int dk, int Hv, int dv, float q_scale,
                                 float eps, bf16* __restrict__ q, bf16* __restrict__ k, bf16* __restrict__ v) {
  const int64_t t = blockIdx.x;
  const int64_t key_dim = int64_t(Hk) * dk, value_dim = int64_t(Hv) * dv;
  const bf16* row = conv + t * (2 * key_dim + value_dim);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
  for (int hh = warp; hh < 2 * Hk; hh += warps) {
    const bool is_q = hh < Hk;
    const int head = is_q ? hh : hh - Hk;
    const bf16* src = row + (is_q ? 0 : key_dim) + int64_t(head) * dk;
    float held[kSplitHeld];
    float ss = 0.0f;
#pragma unroll
    for (int j = 0; j < kSplitHeld; ++j) {
      const int i = lane + 32 * j;
      held[j] = i < dk ? __bfloat162float(src[i]) : 0.0f;
      if (i < dk) ss += held[j] * held[j];
    }
    for (int i = lane + 32 * kSplitHeld; i < dk; i += 32) {
      const float x = __bfloat162float(src[i]);
      ss += x * x;
    }
    ss = detail::warp_sum(ss);
    const float f = (is_q ? q_scale : 1.0f) / sqrtf(ss + eps);
    bf16* dst = (is_q ? q : k) + (t * Hk + head) * dk;
#pragma unroll
    for (int j = 0; j < kSplitHeld; ++j) {
      const int i = lane + 32 * j;
      if (i < dk) dst[i] = __float2bfloat16_rn(held[j] * f);
    }
    for (int i = lane + 32 * kSplitHeld; i < dk; i += 32) dst[i] = __float2bfloat16_rn(__bfloat162float(src[i]) * f);
  }
  const bf16* vs = row + 2 * key_dim;
  bf16* vd = v + t * value_dim;
  if (value_dim % 8 == 0 && ((reinterpret_cast<uintptr_t>(vs) | reinterpret_cast<uintptr_t>(vd)) & 15) == 0) {
    for (int64_t i = threadIdx.x; i < value_dim / 8; i += blockDim.x)
      reinterpret_cast<uint4*>(vd)[i] = reinterpret_cast<const uint4*>(vs)[i];
  } else {
    for (int64_t i = threadIdx.x; i < value_dim; i += blockDim.x) vd[i] = vs[i];
  }
}

// Block (x, row): x < 2*Hk is one q or k head (its channels' conv, then its l2 norm as gdn_split_kernel
// forms it: one warp, lane-strided, the butterfly); the later blocks 128 value channels each.
constexpr int kPrepThreads = 128, kPrepMaxK = detail::kConvStepMaxK, kPrepMaxDk = 1024;

__global__ void __launch_bounds__(kPrepThreads)
    conv_split_rows_kernel(const bf16* __restrict__ qkv, int Hk, int dk, int Hv, int dv, const bf16* __restrict__ w,
                           int K, bf16* tail1, bf16* const* __restrict__ tails, float q_scale, float eps,
                           bf16* __restrict__ q, bf16* __restrict__ k, bf16* __restrict__ v, bool early) {
  detail::pdl_wait();  // programmatic launch in a decode step: the product before writes qkv
  if (early) detail::pdl_trigger();
  __shared__ float cv[kPrepMaxDk];
  __shared__ float scale;
  const int64_t row = blockIdx.y, key_dim = int64_t(Hk) * dk, C = 2 * key_dim + int64_t(Hv) * dv;
  bf16* tail = tails ? tails[row] : tail1;
  const bf16* x = qkv + row * C;
  // conv + SiLU of channel c, its tail advanced; the value rounded to bf16 as the conv's output is.
  auto conv = [&](int64_t c) {
    const detail::ConvTaps taps = detail::conv_taps(tail, C, c, w, K);
    const bf16 xin = x[c];
    detail::conv_advance(tail, C, c, taps, K, xin);
    return detail::conv_apply(taps, K, xin);
  };
  if (blockIdx.x < 2 * Hk) {
    const bool is_q = blockIdx.x < Hk;
    const int head = is_q ? blockIdx.x : blockIdx.x - Hk;
    const int64_t c0 = (is_q ? 0 : key_dim) + int64_t(head) * dk;
    for (int i = threadIdx.x; i < dk; i += kPrepThreads) cv[i] = conv(c0 + i);
    __syncthreads();
    if (threadIdx.x < 32) {
      float ss = 0.0f;
      for (int i = threadIdx.x; i < dk; i += 32) ss += cv[i] * cv[i];
      ss = detail::warp_sum(ss);
      if (threadIdx.x == 0) scale = (is_q ? q_scale : 1.0f) / sqrtf(ss + eps);
    }
    __syncthreads();
    bf16* dst = (is_q ? q : k) + (row * Hk + head) * dk;
    for (int i = threadIdx.x; i < dk; i += kPrepThreads) dst[i] = __float2bfloat16_rn(cv[i] * scale);
    return;
  }
  const int64_t i = int64_t(blockIdx.x - 2 * Hk) * kPrepThreads + threadIdx.x;
  if (i < int64_t(Hv) * dv) v[row * Hv * dv + i] = __float2bfloat16_rn(conv(2 * key_dim + i));
}

template <class S>
__device__ __forceinline__ float load_f(const S* p, int64_t i);
template <>
__device__ __forceinline__ float load_f<float>(const float* p, int64_t i) { return p[i]; }
template <>
__device__ __forceinline__ float load_f<__half>(const __half* p, int64_t i) { return __half2float(p[i]); }

template <class S>
__global__ void to_bf16_kernel(const S* __restrict__ src, int64_t n, bf16* __restrict__ dst) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) dst[i] = __float2bfloat16_rn(load_f(src, i));
}

// splitmix64 of (seed, i): independent of the launch shape, so a fill is reproducible anywhere.
__device__ __forceinline__ float uniform01(uint64_t seed, uint64_t i) {
  uint64_t z = seed * 0xd1b54a32d192ed03ull + 0x9e3779b97f4a7c15ull * (i + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return float(z >> 40) * (1.0f / 16777216.0f);
}

template <class T>
__global__ void fill_uniform_kernel(T* __restrict__ dst, int64_t n, float lo, float hi, uint64_t seed) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    dst[i] = detail::from_f<T>(lo + (hi - lo) * uniform01(seed, uint64_t(i)));
}

// Grid-stride launches for fills: weights can exceed 2^31 elements per matrix in large experts tensors.
unsigned fill_blocks(int64_t n) {
  const int64_t b = (n + 255) / 256;
  return static_cast<unsigned>(b < 65536 * 16 ? b : 65536 * 16);
}

}  // namespace

void embed_rows(const bf16* table, const int32_t* ids, int64_t T, int64_t D, float* h, cudaStream_t stream) {
  HYPIC_CUDA_REQUIRE(T >= 0 && D > 0, "embed_rows: bad shape");
  if (T == 0) return;
  detail::launch_pdl(detail::pdl_chain_enabled(), embed_kernel, dim3(blocks_for(T * D, 256)), dim3(256), 0, stream,
                     table, ids, T, D, h);
  HYPIC_CUDA_LAUNCH_CHECK();
}

void residual_add(float* h, const bf16* a, const bf16* b, const float* b_gate, int64_t T, int64_t D,
                  cudaStream_t stream) {
  HYPIC_CUDA_REQUIRE(T >= 0 && D > 0, "residual_add: bad shape");
  if (T == 0) return;
  residual_add_kernel<<<blocks_for(T * D, 256), 256, 0, stream>>>(h, a, b, b_gate, T, D);
  HYPIC_CUDA_LAUNCH_CHECK();
}

void gdn_gates(const float* ba, int64_t T, int64_t H, const float* A_log, const float* dt_bias, float* g, float* beta,
               cudaStream_t stream) {
  HYPIC_CUDA_REQUIRE(T >= 0 && H > 0, "gdn_gates: bad shape");
  if (T == 0) return;
  detail::launch_pdl(detail::pdl_chain_enabled(), gdn_gates_kernel, dim3(blocks_for(T * H, 256)), dim3(256), 0, stream,
                     ba, T, H, A_log, dt_bias, g, beta);
  HYPIC_CUDA_LAUNCH_CHECK();
}

void gdn_split_qkv(const bf16* conv, int64_t T, int64_t Hk, int64_t dk, int64_t Hv, int64_t dv, float q_scale,
                   float eps, bf16* q, bf16* k, bf16* v, cudaStream_t stream) {
  HYPIC_CUDA_REQUIRE(Hk > 0 && Hv > 0 && dk > 0 && dk <= 1024 && dv > 0 && T >= 0 && T < (int64_t{1} << 31),
                     "gdn_split_qkv: bad shape");
  if (T == 0) return;
  gdn_split_kernel<<<unsigned(T), 256, 0, stream>>>(conv, int(Hk), int(dk), int(Hv), int(dv), q_scale, eps, q, k, v);
  HYPIC_CUDA_LAUNCH_CHECK();
}

void gdn_conv_split_rows(const bf16* qkv, int64_t N, int64_t Hk, int64_t dk, int64_t Hv, int64_t dv,
                         const bf16* conv_w, int64_t K, bf16* tail, bf16* const* tails, float q_scale, float eps,
                         bf16* q, bf16* k, bf16* v, cudaStream_t stream) {
  HYPIC_CUDA_REQUIRE(Hk > 0 && Hv > 0 && dk > 0 && dk <= kPrepMaxDk && dv > 0 && K >= 2 && K <= kPrepMaxK &&
                         N >= 0 && N <= 65535 && (tails || (tail && N <= 1)),
                     "gdn_conv_split_rows: bad shape (dk <= 1024, 2 <= K <= 8, a tail per row)");
  if (N == 0) return;
  const dim3 grid(unsigned(2 * Hk + (Hv * dv + kPrepThreads - 1) / kPrepThreads), unsigned(N));
  const bool pdl = detail::pdl_chain_enabled();
  detail::launch_pdl(pdl, conv_split_rows_kernel, grid, dim3(kPrepThreads), 0, stream, qkv, int(Hk), int(dk), int(Hv),
                     int(dv), conv_w, int(K), tail, tails, q_scale, eps, q, k, v,
                     detail::pdl_trigger_early(int64_t(grid.x) * grid.y));
}

void convert_to_bf16(const void* src, DType t, int64_t n, bf16* dst, cudaStream_t stream) {
  HYPIC_CUDA_REQUIRE(t == DType::F32 || t == DType::F16 || t == DType::BF16,
                     "convert_to_bf16: source must be F32, F16 or BF16");
  if (n <= 0) return;
  if (t == DType::BF16) {
    HYPIC_CUDA_CHECK(cudaMemcpyAsync(dst, src, sizeof(bf16) * n, cudaMemcpyDeviceToDevice, stream));
    return;
  }
  if (t == DType::F32)
    to_bf16_kernel<<<blocks_for(n, 256), 256, 0, stream>>>(static_cast<const float*>(src), n, dst);
  else
    to_bf16_kernel<<<blocks_for(n, 256), 256, 0, stream>>>(static_cast<const __half*>(src), n, dst);
  HYPIC_CUDA_LAUNCH_CHECK();
}

void fill_uniform(bf16* dst, int64_t n, float lo, float hi, uint64_t seed, cudaStream_t stream) {
  if (n <= 0) return;
  fill_uniform_kernel<<<fill_blocks(n), 256, 0, stream>>>(dst, n, lo, hi, seed);
  HYPIC_CUDA_LAUNCH_CHECK();
}

void fill_uniform(float* dst, int64_t n, float lo, float hi, uint64_t seed, cudaStream_t stream) {
  if (n <= 0) return;
  fill_uniform_kernel<<<fill_blocks(n), 256, 0, stream>>>(dst, n, lo, hi, seed);
  HYPIC_CUDA_LAUNCH_CHECK();
}

}  // namespace hypic::cuda
