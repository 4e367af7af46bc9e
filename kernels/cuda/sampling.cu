#include <cfloat>
#include <climits>

#include "kernels/cuda/check.h"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/sampling.h"

namespace hypic::cuda {
namespace {

constexpr int kThreads = 1024;

template <class T, class Op>
__device__ T block_reduce(T v, Op op, T* scratch) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
  __syncthreads();  // scratch may still be read from a previous call
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  T r = scratch[0];
  for (int w = 1; w < int(blockDim.x / 32); ++w) r = op(r, scratch[w]);
  return r;
}

struct Add {
  template <class T>
  __device__ T operator()(T a, T b) const { return a + b; }
};
struct Max {
  __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

// Arg-max as one 64-bit key: (order key of the value, inverted id) so max picks the lowest id on ties.
__device__ unsigned long long argkey(float v, int64_t i) {
  return (static_cast<unsigned long long>(float_order_key(v)) << 32) | (0xffffffffu - static_cast<uint32_t>(i));
}
struct MaxU64 {
  __device__ unsigned long long operator()(unsigned long long a, unsigned long long b) const { return a > b ? a : b; }
};

// One row per block (every thread of the block calls these).
__device__ void argmax_row(const float* __restrict__ x, int64_t V, int32_t* out) {
  __shared__ unsigned long long scratch[32];
  unsigned long long best = 0;
  for (int64_t i = threadIdx.x; i < V; i += blockDim.x) best = best > argkey(x[i], i) ? best : argkey(x[i], i);
  best = block_reduce(best, MaxU64{}, scratch);
  if (threadIdx.x == 0) *out = int32_t(0xffffffffu - static_cast<uint32_t>(best & 0xffffffffu));
}

__global__ void __launch_bounds__(kThreads) argmax_kernel(const float* __restrict__ logits, int64_t V,
                                                          int32_t* __restrict__ out) {
  argmax_row(logits + int64_t(blockIdx.x) * V, V, out + blockIdx.x);
}

// u01: the row's uniform draw in [0, 1).
__device__ void sample_row(const float* __restrict__ x, int64_t V, float temperature, int top_k, float top_p,
                           float u01, int32_t* out) {
  __shared__ float fscratch[32];
  __shared__ unsigned int uscratch[32];
  __shared__ int pick;
  const float inv_t = 1.0f / temperature;
  // Keys are taken on the scaled logits: scaling by a positive number preserves the order.
  float mx = -INFINITY;
  for (int64_t i = threadIdx.x; i < V; i += blockDim.x) mx = fmaxf(mx, x[i] * inv_t);
  mx = block_reduce(mx, Max{}, fscratch);

  // Top-k threshold: the largest key with at least k values >= it.
  uint32_t kk = 0;
  if (top_k > 0 && top_k < V) {
    for (int bit = 31; bit >= 0; --bit) {
      const uint32_t cand = kk | (1u << bit);
      unsigned int cnt = 0;
      for (int64_t i = threadIdx.x; i < V; i += blockDim.x) cnt += float_order_key(x[i] * inv_t) >= cand;
      if (block_reduce(cnt, Add{}, uscratch) >= unsigned(top_k)) kk = cand;
    }
  }
  auto mass_from = [&](uint32_t thr) {
    float m = 0.0f;
    for (int64_t i = threadIdx.x; i < V; i += blockDim.x) {
      const float xi = x[i] * inv_t;
      if (float_order_key(xi) >= thr) m += expf(xi - mx);
    }
    return block_reduce(m, Add{}, fscratch);
  };
  // Top-p threshold: the largest key whose upper set keeps at least top_p of the top-k mass.
  uint32_t kp = kk;
  if (top_p < 1.0f) {
    const float target = top_p * mass_from(kk);
    uint32_t c = 0;
    for (int bit = 31; bit >= 0; --bit) {
      const uint32_t cand = c | (1u << bit);
      if (mass_from(cand > kk ? cand : kk) >= target) c = cand;
    }
    kp = c > kk ? c : kk;
  }
  // Draw: contiguous id ranges per thread, block scan of their masses, the owning thread walks its range.
  const float total = mass_from(kp);
  const float u = u01 * total;
  const int64_t per = (V + blockDim.x - 1) / blockDim.x, b = threadIdx.x * per;
  const int64_t e = b + per < V ? b + per : V;
  float local = 0.0f;
  for (int64_t i = b; i < e; ++i) {
    const float xi = x[i] * inv_t;
    if (float_order_key(xi) >= kp) local += expf(xi - mx);
  }
  // Exclusive prefix over threads (warp scan + scan of warp totals).
  __shared__ float warp_tot[32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  float incl = local;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const float y = __shfl_up_sync(0xffffffffu, incl, o);
    if (lane >= o) incl += y;
  }
  if (lane == 31) warp_tot[warp] = incl;
  if (threadIdx.x == 0) pick = INT_MAX;
  __syncthreads();
  float before = 0.0f;
  for (int w = 0; w < warp; ++w) before += warp_tot[w];
  float acc = before + incl - local;
  if (local > 0.0f && u >= acc && u < acc + local) {
    int chosen = -1;
    for (int64_t i = b; i < e; ++i) {
      const float xi = x[i] * inv_t;
      if (float_order_key(xi) < kp) continue;
      chosen = int(i);
      acc += expf(xi - mx);
      if (u < acc) break;
    }
    atomicMin(&pick, chosen);
  }
  __syncthreads();
  if (threadIdx.x == 0 && pick == INT_MAX) {
    // u fell past the float sum (rounding): take the last kept token.
    for (int64_t i = V - 1; i >= 0; --i)
      if (float_order_key(x[i] * inv_t) >= kp) {
        pick = int(i);
        break;
      }
  }
  __syncthreads();
  if (threadIdx.x == 0) *out = pick;
}

__global__ void __launch_bounds__(kThreads) sample_kernel(const float* __restrict__ logits, int64_t V,
                                                          SamplingParams p, int32_t* __restrict__ out) {
  const int64_t row = blockIdx.x;
  sample_row(logits + row * V, V, p.temperature, p.top_k, p.top_p, sampling_uniform(p.seed, uint64_t(row)),
             out + row);
}

__global__ void __launch_bounds__(kThreads) draw_kernel(const float* __restrict__ logits, int64_t ld,
                                                        const RowDraw* __restrict__ rows, int32_t* __restrict__ out) {
  const RowDraw r = rows[blockIdx.x];
  if (!r.active) return;
  const float* x = logits + int64_t(blockIdx.x) * ld;
  if (r.temperature <= 0.0f) argmax_row(x, r.n, out + blockIdx.x);
  else sample_row(x, r.n, r.temperature, r.top_k, r.top_p, r.u, out + blockIdx.x);
}

}  // namespace

void argmax_rows(const float* logits, int64_t B, int64_t V, int32_t* out, cudaStream_t stream) {
  HYPIC_CUDA_REQUIRE(V > 0 && V < (int64_t{1} << 31) && B >= 0, "argmax_rows: bad shape");
  if (B == 0) return;
  argmax_kernel<<<unsigned(B), kThreads, 0, stream>>>(logits, V, out);
  HYPIC_CUDA_LAUNCH_CHECK();
}

void sample_rows(const float* logits, int64_t B, int64_t V, const SamplingParams& p, int32_t* out,
                 cudaStream_t stream) {
  HYPIC_CUDA_REQUIRE(V > 0 && V < (int64_t{1} << 31) && B >= 0, "sample_rows: bad shape");
  HYPIC_CUDA_REQUIRE(p.top_p > 0.0f, "sample_rows: top_p must be > 0");
  if (B == 0) return;
  if (p.temperature <= 0.0f) {
    argmax_rows(logits, B, V, out, stream);
    return;
  }
  sample_kernel<<<unsigned(B), kThreads, 0, stream>>>(logits, V, p, out);
  HYPIC_CUDA_LAUNCH_CHECK();
}

void draw_rows(const float* logits, int64_t B, int64_t ld, const RowDraw* rows, int32_t* out, cudaStream_t stream) {
  HYPIC_CUDA_REQUIRE(ld > 0 && B >= 0 && B <= 2147483647, "draw_rows: bad shape");
  if (B == 0) return;
  draw_kernel<<<unsigned(B), kThreads, 0, stream>>>(logits, ld, rows, out);
  HYPIC_CUDA_LAUNCH_CHECK();
}

}  // namespace hypic::cuda
