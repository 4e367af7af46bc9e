// The state chain of a stitch lane (engine_state_ops.h: state_chain). Three forms of one kernel, every
// (head, 32-column tile) block keeping its tile of S in shared memory across the steps:
// - dk = 128 (Qwen3.5, Qwen3-Next, Kimi-Linear): a product step S <- T S + B on tensor cores, each product
//   as three tf32 products of hi/lo parts of T and S (the dropped lo x lo term is below 2^-20 of the
//   product), within the fp32 chain's accuracy (the op tests hold it to 1e-5): on mma.sync (split as read),
//   or on sm_90 on wgmma (T split in registers, S kept split in shared memory; HYPIC_CUDA_CHAIN_TC selects).
// - any dk <= 128: the product on CUDA cores, each thread a 4 x 4 block of the tile (HYPIC_CUDA_CHAIN_TC=0
//   at dk 128 too).
// Row steps (a seam's or the question's tokens) are the same in all: the gated delta rule token by token
// on the tile held in registers, 8 lanes a column.
#include <algorithm>

#include "kernels/cuda/check.h"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/engine_state_ops.h"
#include "kernels/cuda/env_switch.h"
#include "kernels/cuda/mma.cuh"
#include "kernels/cuda/pdl_launch.cuh"
#include "kernels/cuda/sm90.cuh"
#include "kernels/cuda/sm90_host.h"
#include "kernels/cuda/smem_limit.h"

namespace hypic::cuda {
namespace {

constexpr int kChainCols = 32, kChainThreads = 256, kChainWarps = kChainThreads / 32, kChainMaxDk = 128,
              kChainMaxSteps = 128;
static_assert(kChainWarps * 4 == kChainCols, "a row step gives every warp 4 of the tile's columns");
// Row steps stage this many tokens' q, k, v tile, decay and beta in shared memory at a time.
constexpr int kChainStage = 32;

// The launch's steps, copied into shared memory by the kernel (raw storage: StateStep's default member
// initializers would make a __shared__ StateStep array need dynamic initialization).
__device__ __forceinline__ StateStep* chain_steps_smem() {
  __shared__ __align__(16) unsigned char raw[kChainMaxSteps * sizeof(StateStep)];
  return reinterpret_cast<StateStep*>(raw);
}

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

// A row step's tokens t0 .. t0 + m after its first stage: staged into `s` once every warp is done with the
// previous ones (their outputs written out), landed for every thread on return.
__device__ __forceinline__ void chain_restage(const StateStep& step, const ChainDims& d, int t0, int m,
                                              const ChainStage& s) {
  __syncthreads();
  chain_stage_rows(step, d, t0, m, s);
  detail::cp_async_commit();
  detail::cp_async_wait<0>();
  __syncthreads();
}

// The staged outputs of tokens t0 .. t0 + m (fp32 in the stage) out as bf16, once every warp has staged its own.
__device__ __forceinline__ void chain_write_outputs(const StateStep& step, const ChainDims& d, int t0, int m,
                                                    const ChainStage& s) {
  __syncthreads();
  const int ldv = d.H * d.dv;
  for (int e = threadIdx.x; e < m * (kChainCols / 2); e += kChainThreads) {
    const int j = e / (kChainCols / 2), c = 2 * (e % (kChainCols / 2));
    if (d.c0 + c < d.dv)
      *reinterpret_cast<__nv_bfloat162*>(step.o + size_t(t0 + j) * ldv + size_t(d.h) * d.dv + d.c0 + c) =
          __floats2bfloat162_rn(s.o[j * kChainCols + c], s.o[j * kChainCols + c + 1]);
  }
}

// The tokens of a row step on a lane's 16 entries st of the tile's column `col`: four groups of four
// consecutive rows, group g at rows base[g] .. + 3 (valid[g] false: past dk, entries zero and inputs unread).
// The step's first kChainStage tokens are already in the stage of `slot`; 8 lanes share a column (lanes
// 8 apart hold the same rows of 4 columns), so a token needs no block barrier: k.S, q.S and q.k are three
// sums over the 8 lanes of a column (three shuffle rounds), then every lane of the column has
// u = beta (v - exp(g) k.S) and updates S <- exp(g) S + k u^T, and the first writes
// o = exp(g) q.S + (q.k) u (= q . S_new). Outputs go out per stage; the caller keeps the tile.
__device__ __forceinline__ void chain_row_tokens(const StateStep& step, const ChainDims& d, float* slot,
                                                 float (&st)[kChainLaneRows], const int (&base)[4],
                                                 const bool (&valid)[4], int col) {
  const int lane = threadIdx.x % 32, dk = d.dk;
  const ChainStage s = chain_stage(slot, dk);
  for (int t0 = 0; t0 < step.n; t0 += kChainStage) {
    const int m = min(kChainStage, step.n - t0);
    if (t0 > 0) chain_restage(step, d, t0, m, s);
#pragma unroll 2  // the next token's loads and products of q and k overlap this token's reductions
    for (int j = 0; j < m; ++j) {
      const float a = expf(s.g[j]), beta = s.beta[j], v = __bfloat162float(s.v[j * kChainCols + col]);
      float k[kChainLaneRows], q[kChainLaneRows];
#pragma unroll
      for (int g = 0; g < 4; ++g) {
        if (valid[g]) {
          bf16x4_to_float(s.k + j * dk + base[g], k + 4 * g);
          bf16x4_to_float(s.q + j * dk + base[g], q + 4 * g);
        } else {
#pragma unroll
          for (int e = 0; e < 4; ++e) k[4 * g + e] = q[4 * g + e] = 0.0f;
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
    chain_write_outputs(step, d, t0, m, s);
  }
}

// The same tokens in chunks (dk = 128, the tensor-core forms; HYPIC_CUDA_CHAIN_SPANS=chunked, an A/B form that
// measured slower than token by token on an H100, docs/benchmarks.md): each staged
// piece of m <= kChainStage tokens at once from the tile S0 it starts on. With G_j = g_0 + .. + g_j,
//   u_j = beta_j (v_j - e^{G_j} k_j.S0) - sum_{i<j} beta_j e^{G_j - G_i} (k_i.k_j) u_i,
//   o_j = e^{G_j} q_j.S0 + sum_{i<=j} e^{G_j - G_i} (q_j.k_i) u_i,
//   S_m = e^{G_{m-1}} S0 + sum_i e^{G_{m-1} - G_i} k_i u_i^T,
// the token rule unrolled (S_j = e^{g_j} S_{j-1} + k_j u_j^T with u_j = beta_j (v_j - e^{g_j} S_{j-1}^T k_j)).
// The block first turns the piece's q and k into fp32 and forms the two m x m Gram matrices with their decays
// (shared by the 32 columns); then every lane reads S0 once for all m tokens' k.S0 and q.S0 (no dependence
// between tokens), lane r of a column's eight owns tokens r, r + 8, .. and solves for their u in token order
// (one shuffle a token), and the tile takes all m updates in one pass. A token costs a lane about half the
// instructions of the token-by-token walk, and the lanes do not wait on each other token by token.
struct ChainChunk {
  float *k, *q;     // [kChainStage][128] fp32
  float *A, *B;     // [kChainStage][kChunkLd]: beta_j e^{G_j - G_i} k_i.k_j (i < j); e^{G_j - G_i} q_j.k_i (i <= j)
  float *eg, *egm;  // [kChainStage]: e^{G_j}; e^{G_{m-1} - G_j}
};
constexpr int kChunkLd = kChainStage + 1;  // a column's eight lanes read eight rows of A: eight banks
// Float offsets in the slot: past the staged tokens (16-byte aligned), k, q, A, B, eg, egm, the end.
constexpr size_t kChunkK = (chain_stage_bytes(128) + 15) / 16 * 4, kChunkQ = kChunkK + size_t(kChainStage) * 128,
                 kChunkA = kChunkQ + size_t(kChainStage) * 128, kChunkB = kChunkA + size_t(kChainStage) * kChunkLd,
                 kChunkEg = kChunkB + size_t(kChainStage) * kChunkLd, kChunkEgm = kChunkEg + kChainStage,
                 kChunkEnd = kChunkEgm + kChainStage;
__device__ __forceinline__ ChainChunk chain_chunk(float* slot) {
  return {slot + kChunkK, slot + kChunkQ, slot + kChunkA, slot + kChunkB, slot + kChunkEg, slot + kChunkEgm};
}

// Sums of v[0..7] over a column's eight lanes (lanes 8 c .. 8 c + 7), scattered: lane 8 c + r returns the sum of
// everyone's v[r]. Seven shuffles where eight full sums take 24.
__device__ __forceinline__ float chunk_reduce_scatter(float (&v)[8]) {
  const int r = threadIdx.x % 8;
#pragma unroll
  for (int h = 4; h >= 1; h /= 2) {
    const bool up = r & h;  // this lane keeps the upper h of its live values and sends the lower
#pragma unroll
    for (int i = 0; i < h; ++i) {
      const float keep = up ? v[i + h] : v[i], send = up ? v[i] : v[i + h];
      v[i] = keep + __shfl_xor_sync(0xffffffffu, send, h);
    }
  }
  return v[0];
}

__device__ __forceinline__ void chain_row_chunks(const StateStep& step, const ChainDims& d, float* slot,
                                                 float (&st)[kChainLaneRows], const int (&base)[4], int col) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, r8 = lane % 8, grp = lane & ~7;
  const ChainStage s = chain_stage(slot, 128);
  const ChainChunk c = chain_chunk(slot);
  for (int t0 = 0; t0 < step.n; t0 += kChainStage) {
    const int m = min(kChainStage, step.n - t0);
    if (t0 > 0) chain_restage(step, d, t0, m, s);  // (the previous piece's fp32 rows are read by then too)
    // The piece's q and k in fp32; the decays' running sums (warp 0).
    for (int e = threadIdx.x; e < m * 32; e += kChainThreads) {
      const int j = e / 32, i = 4 * (e % 32);
      float x[4];
      bf16x4_to_float(s.k + j * 128 + i, x);
      *reinterpret_cast<float4*>(c.k + j * 128 + i) = make_float4(x[0], x[1], x[2], x[3]);
      bf16x4_to_float(s.q + j * 128 + i, x);
      *reinterpret_cast<float4*>(c.q + j * 128 + i) = make_float4(x[0], x[1], x[2], x[3]);
    }
    if (warp == 0) {
      float G = lane < m ? s.g[lane] : 0.0f;
#pragma unroll
      for (int o = 1; o < 32; o *= 2) {
        const float y = __shfl_up_sync(0xffffffffu, G, o);
        if (lane >= o) G += y;
      }
      const float last = __shfl_sync(0xffffffffu, G, m - 1);
      c.eg[lane] = expf(G);
      c.egm[lane] = expf(last - G);
      c.A[lane * kChunkLd + kChainStage] = G;  // the padding column holds G_j for the Gram's decays
    }
    __syncthreads();
    // The Gram matrices' lower triangles, pair p = j (j + 1) / 2 + i (i <= j) on eight lanes, each taking the
    // same elements 4 r8 + 32 q .. + 3 as in the tile.
    const int pairs = m * (m + 1) / 2;
    for (int p0 = 0; p0 < pairs; p0 += kChainThreads / 8) {
      const int p = p0 + threadIdx.x / 8;
      int j = int((sqrtf(8.0f * float(p) + 1.0f) - 1.0f) * 0.5f);
      if ((j + 1) * (j + 2) / 2 <= p) ++j;
      if (j * (j + 1) / 2 > p) --j;
      const int i = p - j * (j + 1) / 2;
      float kk = 0.0f, qk = 0.0f;
      if (p < pairs) {
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          const int at = 4 * r8 + 32 * q;
          const float4 ki = *reinterpret_cast<const float4*>(c.k + i * 128 + at);
          const float4 kj = *reinterpret_cast<const float4*>(c.k + j * 128 + at);
          const float4 qj = *reinterpret_cast<const float4*>(c.q + j * 128 + at);
          kk = fmaf(ki.x, kj.x, fmaf(ki.y, kj.y, fmaf(ki.z, kj.z, fmaf(ki.w, kj.w, kk))));
          qk = fmaf(ki.x, qj.x, fmaf(ki.y, qj.y, fmaf(ki.z, qj.z, fmaf(ki.w, qj.w, qk))));
        }
      }
#pragma unroll
      for (int o = 1; o < 8; o *= 2) {
        kk += __shfl_xor_sync(0xffffffffu, kk, o);
        qk += __shfl_xor_sync(0xffffffffu, qk, o);
      }
      if (p < pairs && r8 == 0) {
        const float decay = expf(c.A[j * kChunkLd + kChainStage] - c.A[i * kChunkLd + kChainStage]);
        c.A[j * kChunkLd + i] = i < j ? s.beta[j] * decay * kk : 0.0f;
        c.B[j * kChunkLd + i] = decay * qk;
      }
    }
    __syncthreads();
    // k.S0 and q.S0 of every token, then u and o of the tokens this lane owns (8 o + r8), in token order.
    float u_own[kChainStage / 8];
#pragma unroll
    for (int o = 0; o < kChainStage / 8; ++o) {
      u_own[o] = 0.0f;
      if (8 * o < m) {
        float ks[8], qs[8];
#pragma unroll
        for (int r = 0; r < 8; ++r) {
          ks[r] = qs[r] = 0.0f;
          if (8 * o + r < m) {
            const float* kr = c.k + (8 * o + r) * 128;
            const float* qr = c.q + (8 * o + r) * 128;
#pragma unroll
            for (int g = 0; g < 4; ++g) {
              const float4 kv = *reinterpret_cast<const float4*>(kr + base[g]);
              const float4 qv = *reinterpret_cast<const float4*>(qr + base[g]);
              ks[r] = fmaf(st[4 * g], kv.x, fmaf(st[4 * g + 1], kv.y, fmaf(st[4 * g + 2], kv.z, fmaf(st[4 * g + 3], kv.w, ks[r]))));
              qs[r] = fmaf(st[4 * g], qv.x, fmaf(st[4 * g + 1], qv.y, fmaf(st[4 * g + 2], qv.z, fmaf(st[4 * g + 3], qv.w, qs[r]))));
            }
          }
        }
        const float ksj = chunk_reduce_scatter(ks), qsj = chunk_reduce_scatter(qs);
        const int j = 8 * o + r8;
        const bool mine = j < m;
        const float* Aj = c.A + j * kChunkLd;
        const float* Bj = c.B + j * kChunkLd;
        float acc = 0.0f, out = 0.0f;
        if (mine) {
          const float eg = c.eg[j];
          acc = s.beta[j] * (__bfloat162float(s.v[j * kChainCols + col]) - eg * ksj);
          out = eg * qsj;
        }
#pragma unroll
        for (int po = 0; po < o; ++po)  // earlier pieces of eight: all their tokens are in
#pragma unroll
          for (int r = 0; r < 8; ++r) {
            const int i = 8 * po + r;
            const float ui = __shfl_sync(0xffffffffu, u_own[po], grp | r);
            if (mine) {
              acc = fmaf(-Aj[i], ui, acc);
              out = fmaf(Bj[i], ui, out);
            }
          }
#pragma unroll
        for (int r = 0; r < 8; ++r) {
          const int i = 8 * o + r;
          if (i >= m) break;  // the same for the whole block
          const float ui = __shfl_sync(0xffffffffu, acc, grp | r);  // token i's owner has all of it by now
          if (mine && r8 > r) acc = fmaf(-Aj[i], ui, acc);
          if (mine && r8 >= r) out = fmaf(Bj[i], ui, out);
          if (r8 == r) u_own[o] = ui;
        }
        if (mine) s.o[j * kChainCols + col] = out;
      }
    }
    // S <- e^{G_{m-1}} S + sum_i e^{G_{m-1} - G_i} k_i u_i^T.
    const float last = c.eg[m - 1];
#pragma unroll
    for (int i = 0; i < kChainLaneRows; ++i) st[i] *= last;
#pragma unroll
    for (int o = 0; o < kChainStage / 8; ++o) {
      if (8 * o < m) {
        const int j = 8 * o + r8;
        const float w = j < m ? u_own[o] * c.egm[j] : 0.0f;
#pragma unroll
        for (int r = 0; r < 8; ++r) {
          const int i = 8 * o + r;
          if (i >= m) break;
          const float ui = __shfl_sync(0xffffffffu, w, grp | r);
          const float* kr = c.k + i * 128;
#pragma unroll
          for (int g = 0; g < 4; ++g) {
            const float4 kv = *reinterpret_cast<const float4*>(kr + base[g]);
            st[4 * g] = fmaf(kv.x, ui, st[4 * g]);
            st[4 * g + 1] = fmaf(kv.y, ui, st[4 * g + 1]);
            st[4 * g + 2] = fmaf(kv.z, ui, st[4 * g + 2]);
            st[4 * g + 3] = fmaf(kv.w, ui, st[4 * g + 3]);
          }
        }
      }
    }
    chain_write_outputs(step, d, t0, m, s);
  }
}

// A row step on the CUDA-core form's tile (row-major s_tile): warp w owns the tile's columns 4w .. 4w + 3,
// lane l rows 16 (l % 8) .. + 15 of column 4w + l / 8.
__device__ __forceinline__ void chain_rows(const StateStep& step, const ChainDims& d, float* slot, float* s_tile) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, dk = d.dk;
  const int r0 = kChainLaneRows * (lane % 8), col = 4 * warp + lane / 8;
  const int base[4] = {r0, r0 + 4, r0 + 8, r0 + 12};
  const bool valid[4] = {r0 < dk, r0 + 4 < dk, r0 + 8 < dk, r0 + 12 < dk};  // dk % 4 == 0
  float st[kChainLaneRows];
#pragma unroll
  for (int i = 0; i < kChainLaneRows; ++i) st[i] = r0 + i < dk ? s_tile[(r0 + i) * kChainCols + col] : 0.0f;
  chain_row_tokens(step, d, slot, st, base, valid, col);
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
  detail::pdl_wait();
  extern __shared__ __align__(16) float sm[];
  StateStep* steps = chain_steps_smem();
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


// ---------------------------------------------------------------------------------------------------
// The tensor-core form, dk = 128. Shared memory (floats): two step slots (T [128][kTcLdT] of a product
// step, or a row step's first staged tokens), two B tiles [128][kTcLdB], and the S tile stored
// column-major, [32][kTcLdS]. The row strides are 8 mod 32 words, so the products' 8-byte fragment loads
// (8 rows x 4 pairs a half-warp) hit every bank once, and a row step's float4 column reads too.
constexpr int kTcDk = 128, kTcLdT = kTcDk + 8, kTcLdB = kChainCols + 8, kTcLdS = kTcDk + 8;
constexpr size_t kTcSlot = size_t(kTcDk) * kTcLdT;
static_assert(chain_stage_bytes(kTcDk) <= kTcSlot * sizeof(float), "a row step's stage fits in a T slot");
constexpr size_t kTcSmem = sizeof(float) * (2 * kTcSlot + 2 * size_t(kTcDk) * kTcLdB + size_t(kChainCols) * kTcLdS);

// The tile to or from a head's [128][dv] state in memory (columns c0..c0+31, zero past dv on the way in).
// A warp moves an 8-row x 4-column block per instruction: 8 sectors in memory, every bank once in shared.
template <bool In>
__device__ __forceinline__ void tc_tile_copy(float* sT, float* G, int dv, int c0) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
#pragma unroll 4
  for (int it = 0; it < kTcDk * kChainCols / kChainThreads; ++it) {
    const int b = warp + kChainWarps * it, r = 8 * (b % 16) + lane % 8, c = 4 * (b / 16) + lane / 8;
    const bool ok = c0 + c < dv;
    if (In) {
      sT[c * kTcLdS + r] = ok ? G[size_t(r) * dv + c0 + c] : 0.0f;
    } else if (ok) {
      G[size_t(r) * dv + c0 + c] = sT[c * kTcLdS + r];
    }
  }
}

// Queues step `step`'s inputs (one commit group): a product step's T into `slot` and its B tile into `b`,
// a row step's first staged tokens into `slot`.
template <int LdT = kTcLdT>
__device__ __forceinline__ void tc_prefetch(const StateStep* step, const ChainDims& d, float* slot, float* b) {
  if (step && step->n > 0) {
    chain_stage_rows(*step, d, 0, min(kChainStage, step->n), chain_stage(slot, kTcDk));
  } else if (step) {
    if (step->T && !step->replace) {
      const float* T = step->T + size_t(d.h) * kTcDk * kTcDk;
#pragma unroll
      for (int i = 0; i < kTcDk * kTcDk / 4 / kChainThreads; ++i) {
        const int e = threadIdx.x + kChainThreads * i, r = e / (kTcDk / 4), c = 4 * (e % (kTcDk / 4));
        detail::cp_async_16(slot + r * LdT + c, T + size_t(r) * kTcDk + c, 16);
      }
    }
    if (step->B) {
      const float* B = step->B + size_t(d.h) * kTcDk * d.dv;
#pragma unroll
      for (int i = 0; i < kTcDk * kChainCols / 4 / kChainThreads; ++i) {
        const int e = threadIdx.x + kChainThreads * i, r = e / (kChainCols / 4), c = 4 * (e % (kChainCols / 4));
        const bool ok = d.c0 + c < d.dv;
        detail::cp_async_16(b + r * kTcLdB + c, ok ? B + size_t(r) * d.dv + d.c0 + c : B, ok ? 16 : 0);
      }
    }
  }
  detail::cp_async_commit();
}

// A row step on a tile kept in runs of four rows: lane l of warp w holds column 4 w + l / 8 at rows
// 32 g + 4 (l % 8) .. + 3 (g < 4), reached as one float4 by load(col, row) and store(col, row, x) (both
// tensor-core forms' layouts read and write such runs without bank conflicts).
template <bool Chunked, class Load, class Store>
__device__ __forceinline__ void rows_in_runs(const StateStep& step, const ChainDims& d, float* slot, Load&& load,
                                             Store&& store) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, q8 = lane % 8, col = 4 * warp + lane / 8;
  const int base[4] = {4 * q8, 32 + 4 * q8, 64 + 4 * q8, 96 + 4 * q8};
  const bool valid[4] = {true, true, true, true};
  float st[kChainLaneRows];
#pragma unroll
  for (int g = 0; g < 4; ++g) {
    const float4 x = load(col, base[g]);
    st[4 * g] = x.x, st[4 * g + 1] = x.y, st[4 * g + 2] = x.z, st[4 * g + 3] = x.w;
  }
  if constexpr (Chunked)
    chain_row_chunks(step, d, slot, st, base, col);
  else
    chain_row_tokens(step, d, slot, st, base, valid, col);
#pragma unroll
  for (int g = 0; g < 4; ++g) store(col, base[g], make_float4(st[4 * g], st[4 * g + 1], st[4 * g + 2], st[4 * g + 3]));
  __syncthreads();
}

// A row step on the mma.sync form's tile (column-major sT).
template <bool Chunked>
__device__ __forceinline__ void tc_rows(const StateStep& step, const ChainDims& d, float* slot, float* sT) {
  rows_in_runs<Chunked>(
      step, d, slot, [&](int c, int r) { return *reinterpret_cast<const float4*>(sT + c * kTcLdS + r); },
      [&](int c, int r, float4 x) { *reinterpret_cast<float4*>(sT + c * kTcLdS + r) = x; });
}

// x = hi + lo with hi = x truncated to tf32 (its low 13 mantissa bits cleared): lo is exact in fp32,
// |lo| < 2^-10 |x|, and the tensor cores read it truncated to tf32 in turn (an error below 2^-20 |x|).
// Two instructions; rounding hi to nearest instead would halve lo at twice the cost.
__device__ __forceinline__ void tf32_split(float x, uint32_t& hi, uint32_t& lo) {
  hi = __float_as_uint(x) & 0xffffe000u;
  lo = __float_as_uint(x - __uint_as_float(hi));
}

__device__ __forceinline__ void tc_zero(float (&acc)[2][2][4]) {
#pragma unroll
  for (int mt = 0; mt < 2; ++mt)
#pragma unroll
    for (int nt = 0; nt < 2; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[mt][nt][e] = 0.0f;
}

// A product step's T S (T from the slot, S from the column-major tile, both fp32) into acc: warp w takes
// rows 32 (w % 4) .. + 31 and columns 16 (w / 4) .. + 15 of the tile, two 16-row by two 8-column
// fragments. Each product is lo(T) hi(S) + hi(T) lo(S) + hi(T) hi(S) in tf32 (the dropped lo x lo term is
// below 2^-20 of the product). A k-step's 8 indices are taken in the order 0 4 1 5 2 6 3 7 (the
// same in T and S), so that a lane's two k's of a fragment are adjacent in memory. The twelve products of
// a k-step are issued term by term, four accumulators apart, not three into one accumulator in a row.
__device__ __forceinline__ void tc_product(const float* Ts, const float* sT, float (&acc)[2][2][4]) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, t = lane % 4;
  const int r0 = 32 * (warp % 4) + g, n0 = 16 * (warp / 4) + g;
  tc_zero(acc);
#pragma unroll
  for (int k0 = 0; k0 < kTcDk; k0 += 8) {
    uint32_t ah[2][4], al[2][4], bh[2][2], bl[2][2];
#pragma unroll
    for (int mt = 0; mt < 2; ++mt) {
      const float2 x0 = *reinterpret_cast<const float2*>(Ts + (r0 + 16 * mt) * kTcLdT + k0 + 2 * t);
      const float2 x1 = *reinterpret_cast<const float2*>(Ts + (r0 + 16 * mt + 8) * kTcLdT + k0 + 2 * t);
      tf32_split(x0.x, ah[mt][0], al[mt][0]);
      tf32_split(x1.x, ah[mt][1], al[mt][1]);
      tf32_split(x0.y, ah[mt][2], al[mt][2]);
      tf32_split(x1.y, ah[mt][3], al[mt][3]);
    }
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) {
      const float2 y = *reinterpret_cast<const float2*>(sT + (n0 + 8 * nt) * kTcLdS + k0 + 2 * t);
      tf32_split(y.x, bh[nt][0], bl[nt][0]);
      tf32_split(y.y, bh[nt][1], bl[nt][1]);
    }
#pragma unroll
    for (int mt = 0; mt < 2; ++mt)
#pragma unroll
      for (int nt = 0; nt < 2; ++nt) detail::mma_tf32_1688(acc[mt][nt], al[mt], bh[nt]);
#pragma unroll
    for (int mt = 0; mt < 2; ++mt)
#pragma unroll
      for (int nt = 0; nt < 2; ++nt) detail::mma_tf32_1688(acc[mt][nt], ah[mt], bl[nt]);
#pragma unroll
    for (int mt = 0; mt < 2; ++mt)
#pragma unroll
      for (int nt = 0; nt < 2; ++nt) detail::mma_tf32_1688(acc[mt][nt], ah[mt], bh[nt]);
  }
}

template <bool Chunked>
__global__ void __launch_bounds__(kChainThreads, 1)
    state_chain_tc_kernel(int H, int Hk, int dv, const StateStep* __restrict__ steps_g, int n, float* __restrict__ S) {
  detail::pdl_wait();
  extern __shared__ __align__(16) float sm[];
  StateStep* steps = chain_steps_smem();
  // Step slot and B tile of step st: slot(st), b_buf(st) (arithmetic, not a local array of two pointers).
  const auto slot = [&](int st) { return sm + (st & 1) * kTcSlot; };
  const auto b_buf = [&](int st) { return sm + 2 * kTcSlot + (st & 1) * kTcDk * kTcLdB; };
  float* sT = sm + 2 * kTcSlot + 2 * kTcDk * kTcLdB;
  const ChainDims d{H, Hk, kTcDk, dv, int(blockIdx.x), int(blockIdx.y) * kChainCols};
  const int c0 = d.c0, lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, t = lane % 4;
  const int r0 = 32 * (warp % 4) + g, n0 = 16 * (warp / 4) + 2 * t;  // this lane's rows and columns of acc
  const size_t so = size_t(d.h) * kTcDk * dv;
  for (int i = threadIdx.x; i < n; i += kChainThreads) steps[i] = steps_g[i];
  tc_tile_copy<true>(sT, S + so, dv, c0);
  __syncthreads();
  tc_prefetch(&steps[0], d, slot(0), b_buf(0));
  for (int st = 0; st < n; ++st) {
    const StateStep& step = steps[st];
    detail::cp_async_wait<0>();  // step st's inputs have landed,
    __syncthreads();             // for every thread, and step st - 1 is done with its buffers
    tc_prefetch(st + 1 < n ? &steps[st + 1] : nullptr, d, slot(st + 1), b_buf(st + 1));
    if (step.before) tc_tile_copy<false>(sT, step.before + so, dv, c0);
    if (step.n > 0) {  // (tc_rows passes a barrier before it rewrites the tile)
      tc_rows<Chunked>(step, d, slot(st), sT);
      if (step.after) tc_tile_copy<false>(sT, step.after + so, dv, c0);
      continue;
    }
    float acc[2][2][4];
    if (step.replace) {
      tc_zero(acc);
    } else if (step.T) {
      tc_product(slot(st), sT, acc);
    } else {
#pragma unroll
      for (int mt = 0; mt < 2; ++mt)
#pragma unroll
        for (int nt = 0; nt < 2; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e)
            acc[mt][nt][e] = sT[(n0 + 8 * nt + e % 2) * kTcLdS + r0 + 16 * mt + 8 * (e / 2)];
    }
    __syncthreads();  // every warp has read the tile
    const float* b_sm = b_buf(st);
#pragma unroll
    for (int mt = 0; mt < 2; ++mt)
#pragma unroll
      for (int nt = 0; nt < 2; ++nt)
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const int r = r0 + 16 * mt + 8 * half, c = n0 + 8 * nt;
          float x = acc[mt][nt][2 * half], y = acc[mt][nt][2 * half + 1];
          if (step.B) {
            const float2 b = *reinterpret_cast<const float2*>(b_sm + r * kTcLdB + c);
            x += b.x;
            y += b.y;
          }
          sT[c * kTcLdS + r] = x;
          sT[(c + 1) * kTcLdS + r] = y;
          if (step.after && c0 + c < dv)  // dv % 4 == 0 and c even: both columns in or both out
            *reinterpret_cast<float2*>(step.after + so + size_t(r) * dv + c0 + c) = make_float2(x, y);
        }
  }
  detail::cp_async_wait<0>();
  __syncthreads();
  tc_tile_copy<false>(sT, S + so, dv, c0);
}

// ---------------------------------------------------------------------------------------------------
// The warpgroup form (sm_90a, dk = 128): a product step's T S on wgmma m64n32k8 tf32, warpgroup w taking rows
// 64 w .. 64 w + 63 of the tile, the same three terms (lo T hi S + hi T lo S + hi T hi S) as the form above.
// T, the A operand, goes from its slot to registers and is split there. S, the B operand, is kept split
// (S = hi + lo exactly) as two K-major tiles [32 columns][128 rows] in the 128-byte swizzled layout wgmma
// reads: rows 32 s .. 32 s + 31 of column n are 128 bytes at 4096 s + 128 n, their 16-byte pieces permuted by
// n % 8. A row step reads and writes a lane's four consecutive rows of a column as one float4 there without
// bank conflicts, as in the form above.
constexpr int kWgLdT = kTcDk + 4;  // rows of T 4 banks apart: a fragment's scalar loads hit every bank once
constexpr size_t kWgSlot = size_t(kTcDk) * kWgLdT;     // floats
constexpr size_t kWgPart = size_t(kChainCols) * kTcDk;  // floats: one of S's two parts
static_assert(chain_stage_bytes(kTcDk) <= kWgSlot * sizeof(float), "a row step's stage fits in a T slot");
// The parts first (1024-byte aligned: the alignment slack is the last term), then two slots and two B tiles.
constexpr size_t kWgSmem = sizeof(float) * (2 * kWgPart + 2 * kWgSlot + 2 * size_t(kTcDk) * kTcLdB) + 1024;
static_assert(kChunkEnd <= kWgSlot && kChunkEnd <= kTcSlot,
              "a chunked row step's fp32 rows and Gram matrices fit in a T slot beside its stage");

// Float offset of S's (row k, column n) in a part.
__device__ __forceinline__ int wg_at(int k, int n) {
  return (k >> 5) * (kChainCols * 32) + n * 32 + ((((k & 31) >> 2) ^ (n & 7)) << 2) + (k & 3);
}

__device__ __forceinline__ void wg_store(float* hi, float* lo, int at, float x) {
  uint32_t h, l;
  tf32_split(x, h, l);
  hi[at] = __uint_as_float(h);
  lo[at] = __uint_as_float(l);
}

// The tile to or from a head's [128][dv] state in memory (columns c0..c0+31, zero past dv on the way in). A
// warp moves 4 consecutive rows x 8 columns an instruction: 32-byte pieces of 4 rows in memory, every bank of
// a part once.
template <bool In>
__device__ __forceinline__ void wg_tile_copy(float* hi, float* lo, float* G, int dv, int c0) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
#pragma unroll 4
  for (int it = 0; it < kTcDk * kChainCols / kChainThreads; ++it) {
    const int b = warp + kChainWarps * it, r = 4 * (b / 4) + lane / 8, c = 8 * (b % 4) + lane % 8;
    const bool ok = c0 + c < dv;
    const int at = wg_at(r, c);
    if (In) {
      wg_store(hi, lo, at, ok ? G[size_t(r) * dv + c0 + c] : 0.0f);
    } else if (ok) {
      G[size_t(r) * dv + c0 + c] = hi[at] + lo[at];
    }
  }
}

// A row step on the split tile (S = hi + lo, split again on the way back).
template <bool Chunked>
__device__ __forceinline__ void wg_rows(const StateStep& step, const ChainDims& d, float* slot, float* hi, float* lo) {
  rows_in_runs<Chunked>(
      step, d, slot,
      [&](int c, int r) {
        const int at = wg_at(r, c);
        const float4 h = *reinterpret_cast<const float4*>(hi + at), l = *reinterpret_cast<const float4*>(lo + at);
        return make_float4(h.x + l.x, h.y + l.y, h.z + l.z, h.w + l.w);
      },
      [&](int c, int r, float4 x) {
        uint32_t h[4], l[4];
        tf32_split(x.x, h[0], l[0]);
        tf32_split(x.y, h[1], l[1]);
        tf32_split(x.z, h[2], l[2]);
        tf32_split(x.w, h[3], l[3]);
        const int at = wg_at(r, c);
        *reinterpret_cast<float4*>(hi + at) =
            make_float4(__uint_as_float(h[0]), __uint_as_float(h[1]), __uint_as_float(h[2]), __uint_as_float(h[3]));
        *reinterpret_cast<float4*>(lo + at) =
            make_float4(__uint_as_float(l[0]), __uint_as_float(l[1]), __uint_as_float(l[2]), __uint_as_float(l[3]));
      });
}

// T's k-slices s0 .. s0 + 7 of this thread's rows, split into tf32 hi / lo register fragments.
__device__ __forceinline__ void wg_split_slices(const float* A, int s0, uint32_t (&ah)[8][4], uint32_t (&al)[8][4]) {
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const int s = s0 + i;
    tf32_split(A[8 * s], ah[i][0], al[i][0]);
    tf32_split(A[8 * kWgLdT + 8 * s], ah[i][1], al[i][1]);
    tf32_split(A[8 * s + 4], ah[i][2], al[i][2]);
    tf32_split(A[8 * kWgLdT + 8 * s + 4], ah[i][3], al[i][3]);
  }
}

// A product step's T S into acc (the wgmma accumulator layout: acc[4 j + 2 h + e] = (row r0 + 8 h, column
// 8 j + 2 t + e), r0 = 64 w + 16 (warp % 4) + g). The warpgroup's 16 k-slices of T are all split into
// registers first (128 of them), then the 48 products issued as one group.
__device__ __forceinline__ void wg_product(const float* Ts, const float* hi, const float* lo, float (&acc)[16]) {
#if HYPIC_SM90A
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, t = lane % 4;
  const float* A = Ts + (64 * (warp / 4) + 16 * (warp % 4) + g) * kWgLdT + t;
  uint32_t ah[2][8][4], al[2][8][4];  // slice s at [s / 8][s % 8]
  wg_split_slices(A, 0, ah[0], al[0]);
  wg_split_slices(A, 8, ah[1], al[1]);
#pragma unroll
  for (int i = 0; i < 16; ++i) acc[i] = 0.0f;
  const uint64_t dh = sm90::desc_sw128(hi, 16, 1024), dl = sm90::desc_sw128(lo, 16, 1024);
  const auto at = [](int s) { return uint32_t(4096 * (s / 4) + 32 * (s % 4)); };  // slice s of a part, bytes
  sm90::wgmma_fence();
#pragma unroll
  for (int s = 0; s < kTcDk / 8; ++s) sm90::wgmma_m64n32k8_tf32_rs(acc, al[s / 8][s % 8], sm90::desc_advance(dh, at(s)));
#pragma unroll
  for (int s = 0; s < kTcDk / 8; ++s) sm90::wgmma_m64n32k8_tf32_rs(acc, ah[s / 8][s % 8], sm90::desc_advance(dl, at(s)));
#pragma unroll
  for (int s = 0; s < kTcDk / 8; ++s) sm90::wgmma_m64n32k8_tf32_rs(acc, ah[s / 8][s % 8], sm90::desc_advance(dh, at(s)));
  sm90::wgmma_commit();
  sm90::wgmma_wait<0>();
  sm90::fence_u32(ah[0]);
  sm90::fence_u32(ah[1]);
  sm90::fence_u32(al[0]);
  sm90::fence_u32(al[1]);
  sm90::fence_regs(acc);
#endif
}

// The three terms of k-slices s0 .. s0 + 7 as one wgmma group.
__device__ __forceinline__ void wg_issue_slices(float (&acc)[16], const uint32_t (&ah)[8][4], const uint32_t (&al)[8][4],
                                                uint64_t dh, uint64_t dl, int s0) {
#if HYPIC_SM90A
  const auto at = [](int s) { return uint32_t(4096 * (s / 4) + 32 * (s % 4)); };  // slice s of a part, bytes
#pragma unroll
  for (int i = 0; i < 8; ++i) sm90::wgmma_m64n32k8_tf32_rs(acc, al[i], sm90::desc_advance(dh, at(s0 + i)));
#pragma unroll
  for (int i = 0; i < 8; ++i) sm90::wgmma_m64n32k8_tf32_rs(acc, ah[i], sm90::desc_advance(dl, at(s0 + i)));
#pragma unroll
  for (int i = 0; i < 8; ++i) sm90::wgmma_m64n32k8_tf32_rs(acc, ah[i], sm90::desc_advance(dh, at(s0 + i)));
  sm90::wgmma_commit();
#endif
}

// wg_product in two groups of 8 k-slices (HYPIC_CUDA_CHAIN_WG_GROUPS=2; an A/B form, 5% slower on an H100), each
// group's T fragments split into registers just before it is issued; `meanwhile` runs while the second group is on the
// tensor cores, in the first group's registers. The kernel queues the next step's copies there (20 cp.async a
// thread), which held the one-group form's products back when queued before them.
template <class F>
__device__ __forceinline__ void wg_product_two_groups(const float* Ts, const float* hi, const float* lo,
                                                      float (&acc)[16], F&& meanwhile) {
#if HYPIC_SM90A
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, t = lane % 4;
  const float* A = Ts + (64 * (warp / 4) + 16 * (warp % 4) + g) * kWgLdT + t;
  const uint64_t dh = sm90::desc_sw128(hi, 16, 1024), dl = sm90::desc_sw128(lo, 16, 1024);
#pragma unroll
  for (int i = 0; i < 16; ++i) acc[i] = 0.0f;
  uint32_t ah0[8][4], al0[8][4], ah1[8][4], al1[8][4];
  wg_split_slices(A, 0, ah0, al0);
  sm90::wgmma_fence();
  wg_issue_slices(acc, ah0, al0, dh, dl, 0);
  wg_split_slices(A, 8, ah1, al1);
  sm90::wgmma_fence();  // the second group's fragments were written after the first fence
  wg_issue_slices(acc, ah1, al1, dh, dl, 8);
  sm90::wgmma_wait<1>();  // the first group is done with its registers
  sm90::fence_u32(ah0);
  sm90::fence_u32(al0);
  meanwhile();
  sm90::wgmma_wait<0>();
  sm90::fence_u32(ah1);
  sm90::fence_u32(al1);
  sm90::fence_regs(acc);
#else
  meanwhile();  // (never launched off sm_90a; the copies are queued all the same)
#endif
}

template <bool Chunked, bool TwoGroups>
__global__ void __launch_bounds__(kChainThreads, 1)
    state_chain_wg_kernel(int H, int Hk, int dv, const StateStep* __restrict__ steps_g, int n, float* __restrict__ S) {
  detail::pdl_wait();
  extern __shared__ __align__(16) unsigned char wg_raw[];
  float* sm = reinterpret_cast<float*>(wg_raw + ((1024 - (sm90::smem_u32(wg_raw) & 1023)) & 1023));
  StateStep* steps = chain_steps_smem();
  float* hi = sm;
  float* lo = sm + kWgPart;
  const auto slot = [&](int st) { return sm + 2 * kWgPart + (st & 1) * kWgSlot; };
  const auto b_buf = [&](int st) { return sm + 2 * kWgPart + 2 * kWgSlot + (st & 1) * kTcDk * kTcLdB; };
  const ChainDims d{H, Hk, kTcDk, dv, int(blockIdx.x), int(blockIdx.y) * kChainCols};
  const int c0 = d.c0, lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, t = lane % 4;
  const int r0 = 64 * (warp / 4) + 16 * (warp % 4) + g, n0 = 2 * t;  // this lane's rows and columns of acc
  const size_t so = size_t(d.h) * kTcDk * dv;
  for (int i = threadIdx.x; i < n; i += kChainThreads) steps[i] = steps_g[i];
  wg_tile_copy<true>(hi, lo, S + so, dv, c0);
  __syncthreads();
  tc_prefetch<kWgLdT>(&steps[0], d, slot(0), b_buf(0));
  for (int st = 0; st < n; ++st) {
    const StateStep& step = steps[st];
    detail::cp_async_wait<0>();        // step st's inputs have landed,
    sm90::fence_proxy_async_shared();  // this thread's writes of the tile are ordered before the products' reads,
    __syncthreads();                   // for every thread, and step st - 1 is done with its buffers
    // (TwoGroups: a product step queues them under its second group of products instead)
    if (!TwoGroups || step.n > 0 || step.replace || !step.T)
      tc_prefetch<kWgLdT>(st + 1 < n ? &steps[st + 1] : nullptr, d, slot(st + 1), b_buf(st + 1));
    if (step.before) wg_tile_copy<false>(hi, lo, step.before + so, dv, c0);
    if (step.n > 0) {  // (wg_rows passes a barrier before it rewrites the tile)
      wg_rows<Chunked>(step, d, slot(st), hi, lo);
      if (step.after) wg_tile_copy<false>(hi, lo, step.after + so, dv, c0);
      continue;
    }
    float acc[16];
    if (step.replace) {
#pragma unroll
      for (int i = 0; i < 16; ++i) acc[i] = 0.0f;
    } else if (step.T) {
      if constexpr (TwoGroups)
        wg_product_two_groups(slot(st), hi, lo, acc, [&] {
          tc_prefetch<kWgLdT>(st + 1 < n ? &steps[st + 1] : nullptr, d, slot(st + 1), b_buf(st + 1));
        });
      else
        wg_product(slot(st), hi, lo, acc);
    } else {
#pragma unroll
      for (int i = 0; i < 16; ++i) {
        const int at = wg_at(r0 + 8 * ((i / 2) % 2), 8 * (i / 4) + n0 + i % 2);
        acc[i] = hi[at] + lo[at];
      }
    }
    __syncthreads();  // both warpgroups have read the tile
    const float* b_sm = b_buf(st);
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int r = r0 + 8 * half, c = 8 * j + n0;
        float x = acc[4 * j + 2 * half], y = acc[4 * j + 2 * half + 1];
        if (step.B) {
          const float2 b = *reinterpret_cast<const float2*>(b_sm + r * kTcLdB + c);
          x += b.x;
          y += b.y;
        }
        wg_store(hi, lo, wg_at(r, c), x);
        wg_store(hi, lo, wg_at(r, c + 1), y);
        if (step.after && c0 + c < dv)  // dv % 4 == 0 and c even: both columns in or both out
          *reinterpret_cast<float2*>(step.after + so + size_t(r) * dv + c0 + c) = make_float2(x, y);
      }
  }
  detail::cp_async_wait<0>();
  __syncthreads();
  wg_tile_copy<false>(hi, lo, S + so, dv, c0);
}

// How the tensor-core forms walk a row step: HYPIC_CUDA_CHAIN_SPANS=chunked takes each staged piece of tokens
// at once (chain_row_chunks), anything else token by token. The warpgroup form's product step: one group of 48
// products (the measured default) or, under HYPIC_CUDA_CHAIN_WG_GROUPS=2, two with the next step's copies
// queued under the second. Which form takes a dk = 128 chain: HYPIC_CUDA_CHAIN_TC=0 the CUDA cores, =1 the
// mma.sync form, =wg (or unset on sm_90) the warpgroup form. All read at every call (the op tests run each).
enum class ChainForm { CudaCores, MmaSync, Warpgroup };
ChainForm chain_form() {
  if (env_is("HYPIC_CUDA_CHAIN_TC", "0")) return ChainForm::CudaCores;
  if (env_is("HYPIC_CUDA_CHAIN_TC", "1")) return ChainForm::MmaSync;
  if (env_is("HYPIC_CUDA_CHAIN_TC", "wg")) return ChainForm::Warpgroup;
  return current_device_is_sm90() ? ChainForm::Warpgroup : ChainForm::MmaSync;
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
  const dim3 grid(unsigned(H), detail::blocks_for(dv, kChainCols));
  const ChainForm form = dk == kTcDk ? chain_form() : ChainForm::CudaCores;
  // Long chains run as several launches of at most kChainMaxSteps steps (S carries over in memory).
  if (form != ChainForm::CudaCores) {  // the two tensor-core forms take the same arguments
    const bool wg = form == ChainForm::Warpgroup;
    HYPIC_CUDA_REQUIRE(!wg || current_device_is_sm90(), "state_chain: the warpgroup form needs an sm_90 device");
    const bool chunked = env_is("HYPIC_CUDA_CHAIN_SPANS", "chunked");
    const bool two = env_is("HYPIC_CUDA_CHAIN_WG_GROUPS", "2");
    auto* kernel = !wg ? (chunked ? state_chain_tc_kernel<true> : state_chain_tc_kernel<false>)
                   : chunked ? (two ? state_chain_wg_kernel<true, true> : state_chain_wg_kernel<true, false>)
                             : (two ? state_chain_wg_kernel<false, true> : state_chain_wg_kernel<false, false>);
    const size_t smem = wg ? kWgSmem : kTcSmem;
    raise_smem_limit(kernel, smem);
    for (int64_t at = 0; at < n; at += kChainMaxSteps) {
      const int64_t m = std::min<int64_t>(kChainMaxSteps, n - at);
      detail::launch_pdl(detail::pdl_chain_enabled(), kernel, dim3(grid), dim3(kChainThreads), smem, stream, int(H),
                         int(Hk), int(dv), steps + at, int(m), S);
      HYPIC_CUDA_LAUNCH_CHECK();
    }
    return;
  }
  raise_smem_limit(state_chain_kernel, smem_for(dk));
  for (int64_t at = 0; at < n; at += kChainMaxSteps) {
    const int64_t m = std::min<int64_t>(kChainMaxSteps, n - at);
    detail::launch_pdl(detail::pdl_chain_enabled(), state_chain_kernel, dim3(grid), dim3(kChainThreads), smem_for(dk),
                       stream, int(H), int(Hk), int(dk), int(dv), steps + at, int(m), S);
    HYPIC_CUDA_LAUNCH_CHECK();
  }
}


}  // namespace hypic::cuda
