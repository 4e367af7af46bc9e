#include "kernels/cuda/family_glue.h"

#include <cmath>

#include "kernels/cuda/check.h"
#include "kernels/cuda/device_util.cuh"

namespace hypic::cuda {
namespace {

using detail::blocks_for;
using detail::sigmoid_f;
using detail::warp_sum;

constexpr int kThreads = 256;

// Sum over the block (blockDim.x a multiple of 32, <= 1024); every thread gets the result.
__device__ float block_sum(float v) {
  __shared__ float part[32];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  v = warp_sum(v);
  __syncthreads();  // part may still be read by a previous call
  if (lane == 0) part[warp] = v;
  __syncthreads();
  float s = 0.0f;
  for (int i = 0; i < int(blockDim.x / 32); ++i) s += part[i];
  return s;
}

__global__ void rmsnorm_residual_kernel(float* __restrict__ h, bf16* __restrict__ x, int64_t dim,
                                        const float* __restrict__ w, float eps, bool zc, float alpha) {
  float* row = h + int64_t(blockIdx.x) * dim;
  bf16* xr = x + int64_t(blockIdx.x) * dim;
  float ss = 0.0f;
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) ss += row[i] * row[i];
  const float r = rsqrtf(block_sum(ss) / float(dim) + eps);
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) {
    const float n = row[i] * r * (zc ? 1.0f + w[i] : w[i]);
    xr[i] = __float2bfloat16_rn(n);
    row[i] = alpha * n;
  }
}

__global__ void scale_kernel(bf16* __restrict__ x, float s, int64_t n) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) x[i] = __float2bfloat16_rn(__bfloat162float(x[i]) * s);
}

// One warp per (row, group).
__global__ void group_rmsnorm_gate_kernel(bf16* __restrict__ o, const bf16* __restrict__ z, int64_t units,
                                          int64_t width, int64_t gw, const float* __restrict__ w, float eps,
                                          float beta) {
  const int64_t unit = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (unit >= units) return;
  const int64_t groups = width / gw, row = unit / groups, j = unit % groups;
  bf16* p = o + row * width + j * gw;
  const bf16* zp = z + row * width + j * gw;
  const float* wp = w + j * gw;
  float ss = 0.0f;
  for (int64_t i = lane; i < gw; i += 32) {
    const float v = __bfloat162float(p[i]);
    ss += v * v;
  }
  const float r = rsqrtf(warp_sum(ss) / float(gw) + eps);
  for (int64_t i = lane; i < gw; i += 32)
    p[i] = __float2bfloat16_rn(__bfloat162float(p[i]) * r * wp[i] * beta * sigmoid_f(__bfloat162float(zp[i])));
}

__global__ void kda_gates_kernel(float* __restrict__ g, float* __restrict__ beta, int64_t T, int64_t H, int64_t dk,
                                 const float* __restrict__ A_log, const float* __restrict__ dt_bias, float lb) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < T * H) beta[i] = sigmoid_f(beta[i]);
  if (i >= T * H * dk) return;
  const int64_t c = i % (H * dk), h = c / dk;
  const float a = expf(A_log[h]), f = g[i] + dt_bias[c];
  if (lb < 0.0f) {
    g[i] = lb * sigmoid_f(a * f);
  } else {
    const float sp = f > 20.0f ? f : log1pf(expf(f));
    g[i] = -a * sp;
  }
}

// (value, index) order of the router: larger value first, then lower index.
__device__ __forceinline__ bool better(float a, int ia, float b, int ib) { return a > b || (a == b && ia < ib); }

__device__ __forceinline__ void warp_best(float& v, int& idx) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, v, o);
    const int oi = __shfl_xor_sync(0xffffffffu, idx, o);
    if (better(ov, oi, v, idx)) {
      v = ov;
      idx = oi;
    }
  }
}

constexpr int kRouteWarps = 4;

// One warp per token; shared memory per warp: score[E], choice[E], group[64].
__global__ void route_kernel(const float* __restrict__ logits, const float* __restrict__ bias, int64_t T, int E, int K,
                             int G, int topk_group, bool mask_inf, bool renorm, float scale, int32_t* __restrict__ ids,
                             float* __restrict__ weights) {
  extern __shared__ float smem[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t t = int64_t(blockIdx.x) * kRouteWarps + warp;
  if (t >= T) return;  // whole warps leave together
  float* score = smem + warp * (2 * E + 64);
  float* choice = score + E;
  float* group = choice + E;
  for (int e = lane; e < E; e += 32) {
    score[e] = sigmoid_f(logits[t * E + e]);
    choice[e] = score[e] + bias[e];
  }
  __syncwarp();
  if (G > 1) {
    const int per = E / G;
    for (int j = lane; j < G; j += 32) {
      float a = -INFINITY, b = -INFINITY;
      for (int e = j * per; e < (j + 1) * per; ++e) {
        const float c = choice[e];
        if (c > a) {
          b = a;
          a = c;
        } else if (c > b) {
          b = c;
        }
      }
      group[j] = a + b;
    }
    __syncwarp();
    const float masked = mask_inf ? -INFINITY : 0.0f;
    for (int j = lane; j < G; j += 32) {
      int rank = 0;
      for (int i = 0; i < G; ++i) rank += better(group[i], i, group[j], j) ? 1 : 0;
      if (rank >= topk_group)
        for (int e = j * per; e < (j + 1) * per; ++e) choice[e] = masked;
    }
    __syncwarp();
  }
  // K rounds of a warp arg-max; a taken expert leaves the race (NaN never compares better). Lane 0 writes
  // each pick and its score; the warp then normalises them.
  float sum = 0.0f;
  for (int j = 0; j < K; ++j) {
    float v = -INFINITY;
    int idx = INT32_MAX;
    for (int e = lane; e < E; e += 32) {
      const float c = choice[e];
      if (c == c && (idx == INT32_MAX || better(c, e, v, idx))) {
        v = c;
        idx = e;
      }
    }
    warp_best(v, idx);
    if (idx == INT32_MAX) idx = 0;  // fewer candidates than K: not a valid config
    sum += score[idx];
    __syncwarp();
    if (lane == 0) {
      choice[idx] = NAN;
      ids[t * K + j] = idx;
      weights[t * K + j] = score[idx];
    }
    __syncwarp();
  }
  for (int j = lane; j < K; j += 32) {
    const float w = weights[t * K + j];
    weights[t * K + j] = (renorm ? w / sum : w) * scale;
  }
}

__global__ void mla_queries_kernel(const bf16* __restrict__ qp, int64_t rows, int nope, int rope, bool deint,
                                   bf16* __restrict__ q) {
  const int hd = nope + rope;
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= rows * hd) return;
  const int64_t r = i / hd;
  const int d = int(i % hd);
  const bf16* src = qp + r * hd;
  int from;
  if (d < rope) from = nope + (deint ? (d < rope / 2 ? 2 * d : 2 * (d - rope / 2) + 1) : d);
  else from = d - rope;
  q[i] = src[from];
}

__global__ void mla_kv_kernel(const bf16* __restrict__ lat, int64_t ld_lat, int64_t R, const bf16* __restrict__ kv,
                              int64_t T, int H, int nope, int rope, int dv, bool deint, bf16* __restrict__ k,
                              bf16* __restrict__ v) {
  const int hd = nope + rope;
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= T * H * hd) return;
  const int64_t t = i / (int64_t(H) * hd);
  const int h = int((i / hd) % H), d = int(i % hd);
  const bf16* src = kv + (t * H + h) * (nope + dv);
  if (d < rope) {
    const int from = deint ? (d < rope / 2 ? 2 * d : 2 * (d - rope / 2) + 1) : d;
    k[i] = lat[t * ld_lat + R + from];
  } else {
    k[i] = src[d - rope];
  }
  v[i] = d < dv ? src[nope + d] : __float2bfloat16_rn(0.0f);
}

__global__ void head_gate_kernel(bf16* __restrict__ x, const float* __restrict__ gate, int64_t rows, int64_t dim) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < rows * dim) x[i] = __float2bfloat16_rn(__bfloat162float(x[i]) * sigmoid_f(gate[i / dim]));
}

__global__ void scalar_extend_kernel(float* __restrict__ T, const float* __restrict__ log_decay, int64_t H,
                                     int64_t tokens) {
  const int64_t h = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (h < H) T[h] = float(double(T[h]) * exp(double(log_decay[h]) * double(tokens)));
}

__global__ void scalar_apply_kernel(float* __restrict__ S, const float* __restrict__ T, const float* __restrict__ body,
                                    int64_t H, int64_t per) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= H * per) return;
  S[i] = (T ? T[i / per] : 1.0f) * S[i] + body[i];
}

}  // namespace

void rmsnorm_into_residual(float* h, bf16* x, int64_t rows, int64_t dim, const float* w, float eps, bool zero_centred,
                           float alpha, cudaStream_t stream) {
  if (rows <= 0) return;
  rmsnorm_residual_kernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(h, x, dim, w, eps, zero_centred, alpha);
  HYPIC_CUDA_CHECK(cudaGetLastError());
}

void scale_bf16(bf16* x, float s, int64_t n, cudaStream_t stream) {
  if (n <= 0 || s == 1.0f) return;
  scale_kernel<<<blocks_for(n, kThreads), kThreads, 0, stream>>>(x, s, n);
  HYPIC_CUDA_CHECK(cudaGetLastError());
}

void group_rmsnorm_gate(bf16* o, const bf16* z, int64_t rows, int64_t width, int64_t groups, const float* w, float eps,
                        float beta, cudaStream_t stream) {
  HYPIC_CUDA_REQUIRE(groups > 0 && width % groups == 0, "group_rmsnorm_gate: width must split into the groups");
  if (rows <= 0) return;
  const int64_t units = rows * groups;
  group_rmsnorm_gate_kernel<<<blocks_for(units * 32, kThreads), kThreads, 0, stream>>>(o, z, units, width,
                                                                                       width / groups, w, eps, beta);
  HYPIC_CUDA_CHECK(cudaGetLastError());
}

void kda_gates(float* g, float* beta, int64_t T, int64_t H, int64_t dk, const float* A_log, const float* dt_bias,
               float lower_bound, cudaStream_t stream) {
  if (T <= 0) return;
  kda_gates_kernel<<<blocks_for(T * H * dk, kThreads), kThreads, 0, stream>>>(g, beta, T, H, dk, A_log, dt_bias,
                                                                              lower_bound);
  HYPIC_CUDA_CHECK(cudaGetLastError());
}

void moe_route_sigmoid_group(const float* logits, const float* bias, int64_t T, int64_t E, int64_t K, int64_t groups,
                             int64_t topk_group, bool mask_inf, bool renormalise, float scale, int32_t* ids,
                             float* weights, cudaStream_t stream) {
  HYPIC_CUDA_REQUIRE(E > 0 && E <= 1024 && K > 0 && K <= E && groups > 0 && groups <= 64 && E % groups == 0,
                     "moe_route_sigmoid_group: unsupported expert or group count");
  if (T <= 0) return;
  const size_t smem = sizeof(float) * kRouteWarps * (2 * E + 64);
  route_kernel<<<blocks_for(T, kRouteWarps), kRouteWarps * 32, smem, stream>>>(
      logits, bias, T, static_cast<int>(E), static_cast<int>(K), static_cast<int>(groups),
      static_cast<int>(topk_group), mask_inf, renormalise, scale, ids, weights);
  HYPIC_CUDA_CHECK(cudaGetLastError());
}

void mla_queries(const bf16* qp, int64_t T, int64_t H, int64_t nope, int64_t rope, bool deinterleave, bf16* q,
                 cudaStream_t stream) {
  const int64_t n = T * H * (nope + rope);
  if (n <= 0) return;
  mla_queries_kernel<<<blocks_for(n, kThreads), kThreads, 0, stream>>>(qp, T * H, static_cast<int>(nope),
                                                                       static_cast<int>(rope), deinterleave, q);
  HYPIC_CUDA_CHECK(cudaGetLastError());
}

void mla_keys_values(const bf16* lat, int64_t ld_lat, int64_t R, const bf16* kv, int64_t T, int64_t H, int64_t nope,
                     int64_t rope, int64_t dv, bool deinterleave, bf16* k, bf16* v, cudaStream_t stream) {
  HYPIC_CUDA_REQUIRE(dv <= nope + rope, "mla_keys_values: values wider than the key head");
  const int64_t n = T * H * (nope + rope);
  if (n <= 0) return;
  mla_kv_kernel<<<blocks_for(n, kThreads), kThreads, 0, stream>>>(lat, ld_lat, R, kv, T, static_cast<int>(H),
                                                                  static_cast<int>(nope), static_cast<int>(rope),
                                                                  static_cast<int>(dv), deinterleave, k, v);
  HYPIC_CUDA_CHECK(cudaGetLastError());
}

void head_sigmoid_scale(bf16* x, const float* gate, int64_t rows, int64_t dim, cudaStream_t stream) {
  if (rows * dim <= 0) return;
  head_gate_kernel<<<blocks_for(rows * dim, kThreads), kThreads, 0, stream>>>(x, gate, rows, dim);
  HYPIC_CUDA_CHECK(cudaGetLastError());
}

void scalar_transfer_extend(float* T, const float* log_decay, int64_t H, int64_t tokens, cudaStream_t stream) {
  if (H <= 0 || tokens == 0) return;
  scalar_extend_kernel<<<blocks_for(H, kThreads), kThreads, 0, stream>>>(T, log_decay, H, tokens);
  HYPIC_CUDA_CHECK(cudaGetLastError());
}

void scalar_transfer_apply(float* S, const float* T, const float* body, int64_t H, int64_t per_head,
                           cudaStream_t stream) {
  if (H * per_head <= 0) return;
  scalar_apply_kernel<<<blocks_for(H * per_head, kThreads), kThreads, 0, stream>>>(S, T, body, H, per_head);
  HYPIC_CUDA_CHECK(cudaGetLastError());
}

}  // namespace hypic::cuda
