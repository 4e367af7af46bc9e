#include "kernels/cuda/check.h"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/engine_state_ops.h"
#include "kernels/cuda/mma.cuh"

#include <algorithm>

namespace hypic::cuda {
namespace {

__global__ void identity_kernel(float* T, int64_t n, int64_t d) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const int64_t e = i % (d * d);
  T[i] = (e / d == e % d) ? 1.0f : 0.0f;
}

__global__ void add_scaled_kernel(float* out, const float* a, float alpha, const float* b, int64_t n) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = a[i] + alpha * b[i];
}

constexpr int kChainCols = 32, kChainThreads = 256, kChainWarps = kChainThreads / 32, kChainMaxDk = 128,
              kChainMaxSteps = 128;
// Row steps stage this many tokens' q, k, v tile, decay and beta in shared memory at a time.
constexpr int kChainStage = 16;
// Per token of a row step: every warp's partial k . S and q . S for the 32 columns, and its q . k.
constexpr int kChainRed = kChainWarps * 2 * kChainCols + kChainWarps;
__host__ __device__ constexpr size_t chain_stage_floats(int dk) { return size_t(kChainStage) * (2 * dk + kChainCols + 2); }

// Row stride of T in shared memory: float4-aligned, and rows 4 apart land on different bank groups.
__host__ __device__ constexpr int chain_ldt(int dk) { return dk + 4; }

// Queues the copy of `step`'s T (dk x dk) and its B tile (dk x 32 columns) into shared memory;
// zero-filled where absent. One commit group per call.
__device__ __forceinline__ void chain_prefetch(const StateStep* step, int h, int c0, int dk, int dv, float* t_sm,
                                               float* b_sm) {
  if (step) {
    if (step->T && !step->replace) {
      const float* T = step->T + size_t(h) * dk * dk;
      const int q = dk / 4;
      for (int e = threadIdx.x; e < dk * q; e += kChainThreads) {
        const int r = e / q, c = 4 * (e % q);
        detail::cp_async_16(t_sm + r * chain_ldt(dk) + c, T + size_t(r) * dk + c, 16);
      }
    }
    if (step->B) {
      const float* B = step->B + size_t(h) * dk * dv;
      for (int e = threadIdx.x; e < dk * (kChainCols / 4); e += kChainThreads) {
        const int i = e / (kChainCols / 4), c = 4 * (e % (kChainCols / 4));
        const bool ok = c0 + c < dv;
        detail::cp_async_16(b_sm + i * kChainCols + c, ok ? B + size_t(i) * dv + c0 + c : B, ok ? 16 : 0);
      }
    }
  }
  detail::cp_async_commit();
}

// A row step on this thread's 4 x 4 block of the tile, s (in registers): per token one reduction of the
// old state against k and q (exp(g) k.S, exp(g) q.S and q.k), then S <- exp(g) S + k u^T with
// u = beta (v - exp(g) k.S), and o = exp(g) q.S + (q.k) u (= q . S_new). `red` holds two rounds of partials
// so that one barrier per token suffices.
__device__ __forceinline__ void chain_rows(const StateStep& step, int H, int h, int kh, int ldqk, int c0, int dk, int dv,
                           float (&s)[4][4], float* stage, float* red) {
  const int tc = threadIdx.x % 8, tr = threadIdx.x / 8, lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const bool rows = 4 * tr < dk, col = c0 + 4 * tc < dv;
  const int ldv = H * dv;
  float* qs = stage;
  float* ks = qs + kChainStage * dk;
  float* vs = ks + kChainStage * dk;
  float* ag = vs + kChainStage * kChainCols;
  float* bb = ag + kChainStage;
  int parity = 0;
  for (int t0 = 0; t0 < step.n; t0 += kChainStage) {
    const int m = min(kChainStage, step.n - t0);
    __syncthreads();  // the previous tokens' staged rows are consumed
    for (int e = threadIdx.x; e < m * dk; e += kChainThreads) {
      const int j = e / dk, i = e % dk;
      const size_t at = size_t(t0 + j) * ldqk + size_t(kh) * dk + i;
      qs[e] = __bfloat162float(step.q[at]);
      ks[e] = __bfloat162float(step.k[at]);
    }
    for (int e = threadIdx.x; e < m * kChainCols; e += kChainThreads) {
      const int j = e / kChainCols, c = e % kChainCols;
      vs[e] = c0 + c < dv ? __bfloat162float(step.v[size_t(t0 + j) * ldv + size_t(h) * dv + c0 + c]) : 0.0f;
    }
    for (int j = threadIdx.x; j < m; j += kChainThreads) {
      ag[j] = expf(step.g[size_t(t0 + j) * H + h]);
      bb[j] = step.beta[size_t(t0 + j) * H + h];
    }
    __syncthreads();
    for (int j = 0; j < m; ++j) {
      const float* kj = ks + j * dk;
      const float* qj = qs + j * dk;
      float pk[4] = {0.f, 0.f, 0.f, 0.f}, pq[4] = {0.f, 0.f, 0.f, 0.f}, pqk = 0.f;
      if (rows) {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const float kv = kj[4 * tr + i], qv = qj[4 * tr + i];
          pqk = fmaf(kv, qv, pqk);
#pragma unroll
          for (int c = 0; c < 4; ++c) {
            pk[c] = fmaf(s[i][c], kv, pk[c]);
            pq[c] = fmaf(s[i][c], qv, pq[c]);
          }
        }
      }
      // Lanes 8 and 16 apart hold the same columns for the warp's other row groups.
#pragma unroll
      for (int off = 8; off < 32; off *= 2) {
#pragma unroll
        for (int c = 0; c < 4; ++c) {
          pk[c] += __shfl_xor_sync(0xffffffffu, pk[c], off);
          pq[c] += __shfl_xor_sync(0xffffffffu, pq[c], off);
        }
        pqk += __shfl_xor_sync(0xffffffffu, pqk, off);
      }
      float* rb = red + parity * kChainRed;
      if (lane < 8) {
        *reinterpret_cast<float4*>(rb + warp * 2 * kChainCols + 4 * tc) = make_float4(pk[0], pk[1], pk[2], pk[3]);
        *reinterpret_cast<float4*>(rb + warp * 2 * kChainCols + kChainCols + 4 * tc) =
            make_float4(pq[0], pq[1], pq[2], pq[3]);
        if (tc == 0) rb[kChainWarps * 2 * kChainCols + warp] = pqk;
      }
      __syncthreads();
      float mk[4] = {0.f, 0.f, 0.f, 0.f}, mq[4] = {0.f, 0.f, 0.f, 0.f}, qk = 0.f;
#pragma unroll
      for (int w = 0; w < kChainWarps; ++w) {
        const float4 a = *reinterpret_cast<const float4*>(rb + w * 2 * kChainCols + 4 * tc);
        const float4 b = *reinterpret_cast<const float4*>(rb + w * 2 * kChainCols + kChainCols + 4 * tc);
        mk[0] += a.x, mk[1] += a.y, mk[2] += a.z, mk[3] += a.w;
        mq[0] += b.x, mq[1] += b.y, mq[2] += b.z, mq[3] += b.w;
        qk += rb[kChainWarps * 2 * kChainCols + w];
      }
      const float a = ag[j], beta = bb[j];
      float u[4];
#pragma unroll
      for (int c = 0; c < 4; ++c) u[c] = (vs[j * kChainCols + 4 * tc + c] - a * mk[c]) * beta;
      if (rows) {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const float kv = kj[4 * tr + i];
#pragma unroll
          for (int c = 0; c < 4; ++c) s[i][c] = fmaf(a, s[i][c], kv * u[c]);
        }
      }
      if (tr == 0 && col) {
        __nv_bfloat162* o = reinterpret_cast<__nv_bfloat162*>(step.o + size_t(t0 + j) * ldv + size_t(h) * dv + c0 + 4 * tc);
        o[0] = __floats2bfloat162_rn(fmaf(a, mq[0], qk * u[0]), fmaf(a, mq[1], qk * u[1]));
        o[1] = __floats2bfloat162_rn(fmaf(a, mq[2], qk * u[2]), fmaf(a, mq[3], qk * u[3]));
      }
      parity ^= 1;
    }
  }
}

// Every (head, 32-column tile) block keeps its tile of S in shared memory across the chain (columns of
// S evolve independently). The next step's T and B tile stream in (cp.async, double-buffered) while this
// step's product runs; each thread owns a 4 x 4 block of the tile (float4 reads of T rows and S rows).
__global__ void __launch_bounds__(kChainThreads)
    state_chain_kernel(int H, int Hk, int dk, int dv, const StateStep* __restrict__ steps_g, int n,
                       float* __restrict__ S) {
  extern __shared__ __align__(16) float sm[];
  __shared__ StateStep steps[kChainMaxSteps];
  __shared__ __align__(16) float red[2 * kChainRed];
  const int ldt = chain_ldt(dk);
  float* t_buf[2] = {sm, sm + dk * ldt};
  float* b_buf[2] = {sm + 2 * dk * ldt, sm + 2 * dk * ldt + dk * kChainCols};
  float* s_tile = sm + 2 * dk * ldt + 2 * dk * kChainCols;  // [dk][kChainCols]
  float* stage = s_tile + dk * kChainCols;                   // row steps' tokens
  const int h = blockIdx.x, c0 = blockIdx.y * kChainCols;
  const int tc = threadIdx.x % 8, tr = threadIdx.x / 8;  // columns 4 tc.., rows 4 tr..
  const bool rows = 4 * tr < dk, col = c0 + 4 * tc < dv;  // dv % 4 == 0: a float4 is all in or all out
  const size_t so = size_t(h) * dk * dv;
  for (int i = threadIdx.x; i < n; i += kChainThreads) steps[i] = steps_g[i];
  for (int e = threadIdx.x; e < dk * kChainCols; e += kChainThreads) {
    const int i = e / kChainCols, c = e % kChainCols;
    s_tile[e] = c0 + c < dv ? S[so + size_t(i) * dv + c0 + c] : 0.0f;
  }
  __syncthreads();
  chain_prefetch(&steps[0], h, c0, dk, dv, t_buf[0], b_buf[0]);
  auto gaddr = [&](float* base, int i) { return reinterpret_cast<float4*>(base + so + size_t(4 * tr + i) * dv + c0 + 4 * tc); };
  for (int st = 0; st < n; ++st) {
    const StateStep& step = steps[st];
    detail::cp_async_wait<0>();  // step st's T and B have landed,
    __syncthreads();             // for every thread, and step st - 1 is done with its buffers
    chain_prefetch(st + 1 < n ? &steps[st + 1] : nullptr, h, c0, dk, dv, t_buf[(st + 1) & 1], b_buf[(st + 1) & 1]);
    const float* t_sm = t_buf[st & 1];
    const float* b_sm = b_buf[st & 1];
    if (step.n > 0) {
      float sr[4][4] = {};
      if (rows) {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const float4 v = *reinterpret_cast<const float4*>(s_tile + (4 * tr + i) * kChainCols + 4 * tc);
          sr[i][0] = v.x, sr[i][1] = v.y, sr[i][2] = v.z, sr[i][3] = v.w;
          if (step.before && col) *gaddr(step.before, i) = v;
        }
      }
      chain_rows(step, H, h, h / (H / Hk), Hk * dk, c0, dk, dv, sr, stage, red);
      if (rows) {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const float4 v = make_float4(sr[i][0], sr[i][1], sr[i][2], sr[i][3]);
          *reinterpret_cast<float4*>(s_tile + (4 * tr + i) * kChainCols + 4 * tc) = v;  // this thread's own block
          if (step.after && col) *gaddr(step.after, i) = v;
        }
      }
      continue;
    }
    float4 acc[4];
    if (rows) {
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[i] = *reinterpret_cast<const float4*>(s_tile + (4 * tr + i) * kChainCols + 4 * tc);
      if (step.before && col) {
#pragma unroll
        for (int i = 0; i < 4; ++i) *gaddr(step.before, i) = acc[i];
      }
      if (step.replace) {
#pragma unroll
        for (int i = 0; i < 4; ++i) acc[i] = make_float4(0.f, 0.f, 0.f, 0.f);
      } else if (step.T) {
#pragma unroll
        for (int i = 0; i < 4; ++i) acc[i] = make_float4(0.f, 0.f, 0.f, 0.f);
        for (int k = 0; k < dk; k += 4) {
          float4 sv[4], tv[4];
#pragma unroll
          for (int q = 0; q < 4; ++q) sv[q] = *reinterpret_cast<const float4*>(s_tile + (k + q) * kChainCols + 4 * tc);
#pragma unroll
          for (int i = 0; i < 4; ++i) tv[i] = *reinterpret_cast<const float4*>(t_sm + (4 * tr + i) * ldt + k);
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            const float t[4] = {tv[i].x, tv[i].y, tv[i].z, tv[i].w};
#pragma unroll
            for (int q = 0; q < 4; ++q) {
              acc[i].x = fmaf(t[q], sv[q].x, acc[i].x);
              acc[i].y = fmaf(t[q], sv[q].y, acc[i].y);
              acc[i].z = fmaf(t[q], sv[q].z, acc[i].z);
              acc[i].w = fmaf(t[q], sv[q].w, acc[i].w);
            }
          }
        }
      }
    }
    __syncthreads();  // every thread has read s_tile
    if (rows) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        float4 v = acc[i];
        if (step.B) {
          const float4 b = *reinterpret_cast<const float4*>(b_sm + (4 * tr + i) * kChainCols + 4 * tc);
          v.x += b.x;
          v.y += b.y;
          v.z += b.z;
          v.w += b.w;
        }
        *reinterpret_cast<float4*>(s_tile + (4 * tr + i) * kChainCols + 4 * tc) = v;
        if (step.after && col) *gaddr(step.after, i) = v;
      }
    }
  }
  detail::cp_async_wait<0>();
  __syncthreads();
  for (int e = threadIdx.x; e < dk * kChainCols; e += kChainThreads) {
    const int i = e / kChainCols, c = e % kChainCols;
    if (c0 + c < dv) S[so + size_t(i) * dv + c0 + c] = s_tile[e];
  }
}

__global__ void copy_batched_kernel(const void* const* src, void* const* dst, const int64_t* sizes, size_t all) {
  const char* s = static_cast<const char*>(src[blockIdx.y]);
  char* d = static_cast<char*>(dst[blockIdx.y]);
  if (!d) return;
  const size_t bytes = sizes ? size_t(sizes[blockIdx.y]) : all;
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  const size_t t = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (((reinterpret_cast<uintptr_t>(s) | reinterpret_cast<uintptr_t>(d) | bytes) & 15) == 0) {
    const uint4* s4 = reinterpret_cast<const uint4*>(s);
    uint4* d4 = reinterpret_cast<uint4*>(d);
    for (size_t i = t; i < bytes / 16; i += stride) d4[i] = s4[i];
  } else {
    for (size_t i = t; i < bytes; i += stride) d[i] = s[i];
  }
}

}  // namespace

void state_chain(int64_t H, int64_t dk, int64_t dv, const StateStep* steps, int64_t n, float* S, cudaStream_t stream,
                 int64_t Hk) {
  HYPIC_CUDA_REQUIRE(dk > 0 && dk <= kChainMaxDk && dk % 4 == 0 && dv > 0 && dv % 4 == 0 && H > 0,
                     "state_chain: dk must be a multiple of 4 in [4, 128] and dv a multiple of 4");
  if (n <= 0) return;
  if (Hk == 0) Hk = H;
  HYPIC_CUDA_REQUIRE(Hk > 0 && H % Hk == 0, "state_chain: H must be a multiple of Hk");
  const auto smem_for = [](int64_t d) {
    return sizeof(float) * (size_t(2 * d * chain_ldt(int(d)) + 3 * d * kChainCols) + chain_stage_floats(int(d)));
  };
  static bool raised = false;  // the opt-in above 48 KB of shared memory, once per process
  if (!raised) {
    HYPIC_CUDA_CHECK(cudaFuncSetAttribute(state_chain_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          int(smem_for(kChainMaxDk))));
    raised = true;
  }
  const dim3 grid(unsigned(H), detail::blocks_for(dv, kChainCols));
  // Long chains run as several launches of at most kChainMaxSteps steps (S carries over in memory).
  for (int64_t at = 0; at < n; at += kChainMaxSteps) {
    const int64_t m = std::min<int64_t>(kChainMaxSteps, n - at);
    state_chain_kernel<<<grid, kChainThreads, smem_for(dk), stream>>>(int(H), int(Hk), int(dk), int(dv), steps + at,
                                                                        int(m), S);
    HYPIC_CUDA_LAUNCH_CHECK();
  }
}

void copy_batched(const void* const* src, void* const* dst, const int64_t* sizes, int64_t n, size_t bytes,
                  cudaStream_t stream) {
  if (n <= 0 || bytes == 0) return;
  HYPIC_CUDA_REQUIRE(n <= 65535, "copy_batched: at most 65535 copies per call");
  const unsigned x = static_cast<unsigned>(std::min<size_t>(64, (bytes / 16 + 255) / 256 + 1));
  copy_batched_kernel<<<dim3(x, unsigned(n)), 256, 0, stream>>>(src, dst, sizes, bytes);
  HYPIC_CUDA_LAUNCH_CHECK();
}

void identity_operators(float* T, int64_t heads, int64_t d, cudaStream_t stream) {
  const int64_t n = heads * d * d;
  if (n <= 0) return;
  identity_kernel<<<detail::blocks_for(n, 256), 256, 0, stream>>>(T, n, d);
  HYPIC_CUDA_LAUNCH_CHECK();
}

void add_scaled(float* out, const float* a, float alpha, const float* b, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  add_scaled_kernel<<<detail::blocks_for(n, 256), 256, 0, stream>>>(out, a, alpha, b, n);
  HYPIC_CUDA_LAUNCH_CHECK();
}

}  // namespace hypic::cuda
