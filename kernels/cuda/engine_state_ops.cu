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
static_assert(kChainWarps * 4 == kChainCols, "a row step gives every warp 4 of the tile's columns");
// Row steps stage this many tokens' q, k, v tile, decay and beta in shared memory at a time.
constexpr int kChainStage = 32;

// Row stride of T in shared memory: float4-aligned, and rows 4 apart land on different bank groups.
__host__ __device__ constexpr int chain_ldt(int dk) { return dk + 4; }

// A row step's staged tokens (in a step's buffer slot, where a product step keeps its T): q and k bf16
// [kChainStage][dk], the tile's v columns bf16 [kChainStage][kChainCols], the log decay and beta, and the
// outputs fp32 [kChainStage][kChainCols] before they go out as bf16.
struct ChainStage {
  bf16 *q, *k, *v;
  float *g, *beta, *o;
};
__host__ __device__ constexpr size_t chain_stage_bytes(int dk) {
  return size_t(kChainStage) * (2 * sizeof(bf16) * dk + sizeof(bf16) * kChainCols + 2 * sizeof(float) +
                                sizeof(float) * kChainCols);
}
// One buffer slot: T (dk x ldt fp32) for a product step, or a row step's first staged tokens.
__host__ __device__ constexpr size_t chain_slot_floats(int dk) {
  const size_t t = size_t(dk) * chain_ldt(dk), st = (chain_stage_bytes(dk) + 15) / 16 * 4;
  return t > st ? t : st;
}
__device__ __forceinline__ ChainStage chain_stage(float* slot, int dk) {
  ChainStage s;
  s.q = reinterpret_cast<bf16*>(slot);
  s.k = s.q + kChainStage * dk;
  s.v = s.k + kChainStage * dk;
  s.g = reinterpret_cast<float*>(s.v + kChainStage * kChainCols);  // dk % 4 == 0: 8-byte aligned at least
  s.beta = s.g + kChainStage;
  s.o = s.beta + kChainStage;
  return s;
}

struct ChainDims {
  int H, Hk, dk, dv, h, c0;
};

// Queues the copy of tokens t0 .. t0 + m of row step `step` into the stage `s` (cp.async; the caller commits).
__device__ __forceinline__ void chain_stage_rows(const StateStep& step, const ChainDims& d, int t0, int m,
                                                 const ChainStage& s) {
  const int kh = d.h / (d.H / d.Hk), ldqk = d.Hk * d.dk, ldv = d.H * d.dv, q4 = d.dk / 4;
  for (int e = threadIdx.x; e < m * q4; e += kChainThreads) {
    const int j = e / q4, i = 4 * (e % q4);
    const size_t at = size_t(t0 + j) * ldqk + size_t(kh) * d.dk + i;
    detail::cp_async_small<8>(s.q + j * d.dk + i, step.q + at, 8);
    detail::cp_async_small<8>(s.k + j * d.dk + i, step.k + at, 8);
  }
  for (int e = threadIdx.x; e < m * (kChainCols / 4); e += kChainThreads) {
    const int j = e / (kChainCols / 4), c = 4 * (e % (kChainCols / 4));
    const bool ok = d.c0 + c < d.dv;  // dv % 4 == 0: four columns are all in or all out
    detail::cp_async_small<8>(s.v + j * kChainCols + c, ok ? step.v + size_t(t0 + j) * ldv + size_t(d.h) * d.dv + d.c0 + c
                                                           : step.v, ok ? 8 : 0);
  }
  for (int j = threadIdx.x; j < m; j += kChainThreads) {
    detail::cp_async_small<4>(s.g + j, step.g + size_t(t0 + j) * d.H + d.h, 4);
    detail::cp_async_small<4>(s.beta + j, step.beta + size_t(t0 + j) * d.H + d.h, 4);
  }
}

// Queues the copy of `step`'s inputs into a buffer slot and the B buffer: a product step's T (dk x dk) and B
// tile (dk x 32 columns), zero-filled where absent; a row step's first staged tokens. One commit group per call.
__device__ __forceinline__ void chain_prefetch(const StateStep* step, const ChainDims& d, float* slot, float* b_sm) {
  const int dk = d.dk;
  if (step && step->n > 0) {
    chain_stage_rows(*step, d, 0, min(kChainStage, step->n), chain_stage(slot, dk));
  } else if (step) {
    if (step->T && !step->replace) {
      const float* T = step->T + size_t(d.h) * dk * dk;
      const int q = dk / 4;
      for (int e = threadIdx.x; e < dk * q; e += kChainThreads) {
        const int r = e / q, c = 4 * (e % q);
        detail::cp_async_16(slot + r * chain_ldt(dk) + c, T + size_t(r) * dk + c, 16);
      }
    }
    if (step->B) {
      const float* B = step->B + size_t(d.h) * dk * d.dv;
      for (int e = threadIdx.x; e < dk * (kChainCols / 4); e += kChainThreads) {
        const int i = e / (kChainCols / 4), c = 4 * (e % (kChainCols / 4));
        const bool ok = d.c0 + c < d.dv;
        detail::cp_async_16(b_sm + i * kChainCols + c, ok ? B + size_t(i) * d.dv + d.c0 + c : B, ok ? 16 : 0);
      }
    }
  }
  detail::cp_async_commit();
}

__device__ __forceinline__ void bf16x4_to_float(const bf16* p, float* x) {
  const uint2 raw = *reinterpret_cast<const uint2*>(p);
  const float2 a = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&raw.x));
  const float2 b = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&raw.y));
  x[0] = a.x, x[1] = a.y, x[2] = b.x, x[3] = b.y;
}

// Rows of the tile a lane holds in a row step: 8 lanes share a column, 16 rows each.
constexpr int kChainLaneRows = 16;
static_assert(kChainLaneRows * 8 == kChainMaxDk, "8 lanes cover a column's dk rows");

// A row step on the block's tile, read from and written back to s_tile; the first kChainStage tokens are
// already in the stage `s` (the step's slot). Warp w owns the tile's columns 4w .. 4w + 3; lane
// l holds rows 16 (l % 8) .. + 15 of column 4w + l / 8, so a token needs no block barrier: k.S, q.S and
// q.k are three sums over the 8 lanes of a column (three shuffle rounds), then every lane of the column
// has u = beta (v - exp(g) k.S) and updates S <- exp(g) S + k u^T, and the first writes
// o = exp(g) q.S + (q.k) u (= q . S_new).
__device__ __forceinline__ void chain_rows(const StateStep& step, const ChainDims& d, float* slot, float* s_tile) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, dk = d.dk;
  const int r0 = kChainLaneRows * (lane % 8), col = 4 * warp + lane / 8;
  const ChainStage s = chain_stage(slot, dk);
  const int ldv = d.H * d.dv;
  float st[kChainLaneRows];
#pragma unroll
  for (int i = 0; i < kChainLaneRows; ++i) st[i] = r0 + i < dk ? s_tile[(r0 + i) * kChainCols + col] : 0.0f;
  for (int t0 = 0; t0 < step.n; t0 += kChainStage) {
    const int m = min(kChainStage, step.n - t0);
    if (t0 > 0) {
      __syncthreads();  // the previous tokens' stage is consumed (outputs written out)
      chain_stage_rows(step, d, t0, m, s);
      detail::cp_async_commit();
      detail::cp_async_wait<0>();
      __syncthreads();
    }
#pragma unroll 2  // the next token's loads and products of q and k overlap this token's reductions
    for (int j = 0; j < m; ++j) {
      const float a = expf(s.g[j]), beta = s.beta[j], v = __bfloat162float(s.v[j * kChainCols + col]);
      float k[kChainLaneRows], q[kChainLaneRows];
#pragma unroll
      for (int i = 0; i < kChainLaneRows; i += 4) {
        if (r0 + i < dk) {
          bf16x4_to_float(s.k + j * dk + r0 + i, k + i);
          bf16x4_to_float(s.q + j * dk + r0 + i, q + i);
        } else {
#pragma unroll
          for (int e = 0; e < 4; ++e) k[i + e] = q[i + e] = 0.0f;
        }
      }
      // Four partial sums each: short dependency chains (a warp's tokens are one long dependent sequence).
      float pk[4] = {0.f, 0.f, 0.f, 0.f}, pq[4] = {0.f, 0.f, 0.f, 0.f}, pqk[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
      for (int i = 0; i < kChainLaneRows; ++i) {
        pk[i & 3] = fmaf(st[i], k[i], pk[i & 3]);
        pq[i & 3] = fmaf(st[i], q[i], pq[i & 3]);
        pqk[i & 3] = fmaf(k[i], q[i], pqk[i & 3]);
      }
      float ks = (pk[0] + pk[1]) + (pk[2] + pk[3]), qs = (pq[0] + pq[1]) + (pq[2] + pq[3]),
            qk = (pqk[0] + pqk[1]) + (pqk[2] + pqk[3]);
#pragma unroll
      for (int off = 1; off < 8; off *= 2) {
        ks += __shfl_xor_sync(0xffffffffu, ks, off);
        qs += __shfl_xor_sync(0xffffffffu, qs, off);
        qk += __shfl_xor_sync(0xffffffffu, qk, off);
      }
      const float u = (v - a * ks) * beta;
      if (lane % 8 == 0) s.o[j * kChainCols + col] = fmaf(a, qs, qk * u);
#pragma unroll
      for (int i = 0; i < kChainLaneRows; ++i) st[i] = fmaf(a, st[i], k[i] * u);
    }
    __syncthreads();  // every warp's outputs are staged
    for (int e = threadIdx.x; e < m * (kChainCols / 2); e += kChainThreads) {
      const int j = e / (kChainCols / 2), c = 2 * (e % (kChainCols / 2));
      if (d.c0 + c < d.dv)
        *reinterpret_cast<__nv_bfloat162*>(step.o + size_t(t0 + j) * ldv + size_t(d.h) * d.dv + d.c0 + c) =
            __floats2bfloat162_rn(s.o[j * kChainCols + c], s.o[j * kChainCols + c + 1]);
    }
  }
#pragma unroll
  for (int i = 0; i < kChainLaneRows; ++i)
    if (r0 + i < dk) s_tile[(r0 + i) * kChainCols + col] = st[i];
  __syncthreads();
}

// Every (head, 32-column tile) block keeps its tile of S in shared memory across the chain (columns of
// S evolve independently). The next step's inputs stream in (cp.async, two slots) while this step runs;
// in a product step each thread owns a 4 x 4 block of the tile (float4 reads of T rows and S rows). (Three
// tf32 tensor-core products per term were tried for the product steps: no faster, as a step waits for its
// T and B tile, 80 KB per block, more than for the arithmetic.)
__global__ void __launch_bounds__(kChainThreads)
    state_chain_kernel(int H, int Hk, int dk, int dv, const StateStep* __restrict__ steps_g, int n,
                       float* __restrict__ S) {
  extern __shared__ __align__(16) float sm[];
  __shared__ StateStep steps[kChainMaxSteps];
  const int ldt = chain_ldt(dk);
  const size_t slot = chain_slot_floats(dk);
  float* t_buf[2] = {sm, sm + slot};
  float* b_buf[2] = {sm + 2 * slot, sm + 2 * slot + dk * kChainCols};
  float* s_tile = sm + 2 * slot + 2 * dk * kChainCols;  // [dk][kChainCols]
  const ChainDims d{H, Hk, dk, dv, int(blockIdx.x), int(blockIdx.y) * kChainCols};
  const int h = d.h, c0 = d.c0;
  const int tc = threadIdx.x % 8, tr = threadIdx.x / 8;  // columns 4 tc.., rows 4 tr..
  const bool rows = 4 * tr < dk, col = c0 + 4 * tc < dv;  // dv % 4 == 0: a float4 is all in or all out
  const size_t so = size_t(h) * dk * dv;
  for (int i = threadIdx.x; i < n; i += kChainThreads) steps[i] = steps_g[i];
  for (int e = threadIdx.x; e < dk * kChainCols; e += kChainThreads) {
    const int i = e / kChainCols, c = e % kChainCols;
    s_tile[e] = c0 + c < dv ? S[so + size_t(i) * dv + c0 + c] : 0.0f;
  }
  __syncthreads();
  chain_prefetch(&steps[0], d, t_buf[0], b_buf[0]);
  auto gaddr = [&](float* base, int i) { return reinterpret_cast<float4*>(base + so + size_t(4 * tr + i) * dv + c0 + 4 * tc); };
  for (int st = 0; st < n; ++st) {
    const StateStep& step = steps[st];
    detail::cp_async_wait<0>();  // step st's inputs have landed,
    __syncthreads();             // for every thread, and step st - 1 is done with its buffers
    chain_prefetch(st + 1 < n ? &steps[st + 1] : nullptr, d, t_buf[(st + 1) & 1], b_buf[(st + 1) & 1]);
    float* t_sm = t_buf[st & 1];
    const float* b_sm = b_buf[st & 1];
    if (step.n > 0) {
      if (step.before && rows && col) {
#pragma unroll
        for (int i = 0; i < 4; ++i) *gaddr(step.before, i) = *reinterpret_cast<const float4*>(s_tile + (4 * tr + i) * kChainCols + 4 * tc);
      }
      chain_rows(step, d, t_sm, s_tile);
      if (step.after && rows && col) {
#pragma unroll
        for (int i = 0; i < 4; ++i) *gaddr(step.after, i) = *reinterpret_cast<const float4*>(s_tile + (4 * tr + i) * kChainCols + 4 * tc);
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
    return sizeof(float) * (2 * chain_slot_floats(int(d)) + size_t(3 * d * kChainCols));
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
