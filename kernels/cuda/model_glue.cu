#include "kernels/cuda/model_glue.h"

#include <cuda_fp16.h>

#include "kernels/cuda/check.h"
#include "kernels/cuda/device_util.cuh"

namespace hypic::cuda {
namespace {

using detail::blocks_for;

__global__ void embed_kernel(const bf16* __restrict__ table, const int32_t* __restrict__ ids, int64_t T, int64_t D,
                             float* __restrict__ h) {
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
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= T * H) return;
  const int64_t t = i / H, j = i % H;
  const float b = ba[t * 2 * H + j], a = ba[t * 2 * H + H + j] + dt_bias[j];
  const float sp = a > 20.0f ? a : log1pf(expf(a));
  beta[i] = detail::sigmoid_f(b);
  g[i] = -expf(A_log[j]) * sp;
}

// One block per token: warps l2-normalise the q and k heads, then every thread copies v.
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
    float ss = 0.0f;
    for (int i = lane; i < dk; i += 32) {
      const float x = __bfloat162float(src[i]);
      ss += x * x;
    }
    ss = detail::warp_sum(ss);
    const float f = (is_q ? q_scale : 1.0f) / sqrtf(ss + eps);
    bf16* dst = (is_q ? q : k) + (t * Hk + head) * dk;
    for (int i = lane; i < dk; i += 32) dst[i] = __float2bfloat16_rn(__bfloat162float(src[i]) * f);
  }
  const bf16* vs = row + 2 * key_dim;
  bf16* vd = v + t * value_dim;
  for (int64_t i = threadIdx.x; i < value_dim; i += blockDim.x) vd[i] = vs[i];
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
  embed_kernel<<<blocks_for(T * D, 256), 256, 0, stream>>>(table, ids, T, D, h);
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
  gdn_gates_kernel<<<blocks_for(T * H, 256), 256, 0, stream>>>(ba, T, H, A_log, dt_bias, g, beta);
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
