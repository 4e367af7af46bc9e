// Chunked Gated DeltaNet prefill in the WY/UT form, two kernels:
//
// 1. gdn_prep (parallel over chunks x heads): for each chunk of C = 64 tokens, with G_i the cumulative log
//    decay inside the chunk and L_ij = beta_i exp(G_i - G_j) (k_i . k_j) for j < i (strictly lower),
//    A = (I + L)^-1 (forward substitution, fp32), and
//        u = A diag(beta) V            (pseudo-values when the chunk starts from a zero state)
//        W = A diag(beta exp(G)) K     (how the chunk's pseudo-values depend on the incoming state)
//    so that the true pseudo-values are  u - W S0  (this is the CPU's forward substitution in matrix form).
//
// 2. gdn_state (sequential over chunks, parallel over heads x column blocks of the state): per chunk
//        Vn  = u - W S0
//        O   = diag(exp(G)) Q S0 + (tril(Q K^T) o exp(G_i - G_j)) Vn
//        S   = exp(G_L) S0 + K^T diag(exp(G_L - G_j)) Vn
//    Columns of S never mix (A_t acts on the left), so the dv columns split into independent blocks.
//
// Transfer operator in the same pass. The transfer operator of a span is the same recurrence run on a
// dk x dk "state" M with v = 0 (u = 0) starting from the incoming operator: per chunk
//        M <- exp(G_L) M - K^T diag(exp(G_L - G_j)) W M = (exp(G_L) I - K_d^T W) M,
// i.e. T_chunk = exp(G_L) I - K_d^T W with K_d the decayed keys: the chunk-level form of
// prod_t exp(g_t)(I - beta_t k_t k_t^T). gdn_state therefore just gets ceil(dk / BV) more column blocks
// whose u is zero and whose initial columns are the incoming operator; prep work (A, W) is shared, so the
// build costs extra state-recurrence blocks only, no second pass over the tokens.
//
// Products run on tensor cores through wmma (bf16 inputs, fp32 accumulation); the state and the
// operator stay fp32 in shared memory between chunks and are rounded to bf16 only as mma inputs.
#include <mma.h>

#include "kernels/cuda/check.h"
#include "kernels/cuda/delta_rule.h"
#include "kernels/cuda/device_util.cuh"

namespace hypic::cuda {
namespace {

using namespace nvcuda;
using detail::align128;

constexpr int kC = 64;        // chunk length
constexpr int kBV = 32;       // state columns per gdn_state block
constexpr int kThreads = 128; // 4 warps; warp w owns row tile w of every 64-row product
constexpr int kLdC = kC + 8;  // bf16 row stride of 64-wide tiles (multiple of 8, staggers banks)
constexpr int kLdCf = kC + 4; // fp32 row stride of 64-wide tiles

using FragA = wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major>;
using FragAc = wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::col_major>;
using FragB = wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::row_major>;
using FragBc = wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major>;
using FragC = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;

struct SeqRange {
  int64_t bos, eos;
};

__device__ __forceinline__ SeqRange seq_range(const int32_t* cu, int64_t n, int64_t T) {
  return cu ? SeqRange{cu[n], cu[n + 1]} : SeqRange{0, T};
}

// ---------------------------------------------------------------------------------------------------
// Kernel 1: per (chunk, head, sequence): G, A = (I + L)^-1, u, W.

template <int DK>
struct PrepSmem {
  static constexpr int kLdK = DK + 8, kLdKf = DK + 4;
  static constexpr size_t ks = 0;
  static constexpr size_t vs = align128(ks + sizeof(__nv_bfloat16) * kC * kLdK);
  static constexpr size_t kk = align128(vs + sizeof(__nv_bfloat16) * kC * kLdC);
  static constexpr size_t ainv = align128(kk + sizeof(float) * kC * kLdCf);
  static constexpr size_t ab = align128(ainv + sizeof(float) * kC * kLdCf);
  static constexpr size_t aw = align128(ab + sizeof(__nv_bfloat16) * kC * kLdC);
  static constexpr size_t stg = align128(aw + sizeof(__nv_bfloat16) * kC * kLdC);
  static constexpr size_t gs = align128(stg + sizeof(float) * kC * kLdKf);
  static constexpr size_t bs = align128(gs + sizeof(float) * kC);
  static constexpr size_t bytes = align128(bs + sizeof(float) * kC);
};

template <int DK>
__global__ void __launch_bounds__(kThreads) gdn_prep_kernel(GdnShape s, const bf16* __restrict__ k,
                                                            const bf16* __restrict__ v, const float* __restrict__ g,
                                                            const float* __restrict__ beta,
                                                            const int32_t* __restrict__ cu, bf16* __restrict__ W,
                                                            bf16* __restrict__ U, float* __restrict__ Gc) {
  using SM = PrepSmem<DK>;
  constexpr int kLdK = SM::kLdK, kLdKf = SM::kLdKf;
  extern __shared__ __align__(128) unsigned char smem[];
  bf16* Ks = reinterpret_cast<bf16*>(smem + SM::ks);
  bf16* Vs = reinterpret_cast<bf16*>(smem + SM::vs);
  float* KK = reinterpret_cast<float*>(smem + SM::kk);
  float* Ai = reinterpret_cast<float*>(smem + SM::ainv);
  bf16* Ab = reinterpret_cast<bf16*>(smem + SM::ab);
  bf16* Aw = reinterpret_cast<bf16*>(smem + SM::aw);
  float* Stg = reinterpret_cast<float*>(smem + SM::stg);
  float* Gs = reinterpret_cast<float*>(smem + SM::gs);
  float* Bs = reinterpret_cast<float*>(smem + SM::bs);

  const int64_t n = blockIdx.z, h = blockIdx.y;
  const SeqRange sr = seq_range(cu, n, s.T);
  const int64_t t0 = sr.bos + int64_t(blockIdx.x) * kC;
  if (t0 >= sr.eos) return;
  const int L = int((sr.eos - t0 < kC ? sr.eos - t0 : kC));
  const int64_t H = s.H, kh = h / (s.H / s.Hk);
  const int dk = int(s.dk), dv = int(s.dv);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;

  detail::load_tile_bf16(Ks, kLdK, k + (t0 * s.Hk + kh) * dk, s.Hk * dk, L, dk, kC, DK);
  if (warp == 0) {
    // Inclusive scan of g over the chunk (two elements per lane); pad rows repeat the last value.
    float a = lane * 2 < L ? g[(t0 + lane * 2) * H + h] : 0.0f;
    float b = lane * 2 + 1 < L ? g[(t0 + lane * 2 + 1) * H + h] : 0.0f;
    b += a;
    float incl = b;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const float y = __shfl_up_sync(0xffffffffu, incl, o);
      if (lane >= o) incl += y;
    }
    const float excl = incl - b;
    Gs[lane * 2] = excl + a;
    Gs[lane * 2 + 1] = incl;
    Bs[lane * 2] = lane * 2 < L ? beta[(t0 + lane * 2) * H + h] : 0.0f;
    Bs[lane * 2 + 1] = lane * 2 + 1 < L ? beta[(t0 + lane * 2 + 1) * H + h] : 0.0f;
  }
  __syncthreads();
  for (int i = threadIdx.x; i < L; i += kThreads) Gc[(t0 + i) * H + h] = Gs[i];

  // KK = K K^T: warp w computes row tile w against the 4 column tiles.
  {
    FragC acc[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) wmma::fill_fragment(acc[j], 0.0f);
#pragma unroll
    for (int kk = 0; kk < DK; kk += 16) {
      FragA a;
      wmma::load_matrix_sync(a, Ks + warp * 16 * kLdK + kk, kLdK);
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        FragBc b;
        wmma::load_matrix_sync(b, Ks + j * 16 * kLdK + kk, kLdK);
        wmma::mma_sync(acc[j], a, b, acc[j]);
      }
    }
#pragma unroll
    for (int j = 0; j < 4; ++j)
      wmma::store_matrix_sync(KK + warp * 16 * kLdCf + j * 16, acc[j], kLdCf, wmma::mem_row_major);
  }
  __syncthreads();

  // A = (I + L)^-1 column by column: column c depends only on itself, so thread c runs its own
  // forward substitution with no barriers. A[i][c] = [i == c] - sum_{c <= j < i} L[i][j] A[j][c].
  if (threadIdx.x < kC) {
    const int c = threadIdx.x;
    for (int i = 0; i < kC; ++i) {
      float acc = 0.0f;
      if (i > c) {
        const float bi = Bs[i], gi = Gs[i];
        for (int j = c; j < i; ++j) acc -= bi * expf(gi - Gs[j]) * KK[i * kLdCf + j] * Ai[j * kLdCf + c];
      }
      Ai[i * kLdCf + c] = i == c ? 1.0f : (i > c ? acc : 0.0f);
    }
  }
  __syncthreads();
  for (int e = threadIdx.x; e < kC * kC; e += kThreads) {
    const int i = e / kC, j = e % kC;
    const float a = Ai[i * kLdCf + j] * Bs[j];
    Ab[i * kLdC + j] = __float2bfloat16_rn(a);
    Aw[i * kLdC + j] = __float2bfloat16_rn(a * expf(Gs[j]));
  }
  __syncthreads();

  // W = Aw K  ([64, DK]).
  {
    for (int ct = 0; ct < DK / 16; ++ct) {
      FragC acc;
      wmma::fill_fragment(acc, 0.0f);
#pragma unroll
      for (int kk = 0; kk < kC; kk += 16) {
        FragA a;
        FragB b;
        wmma::load_matrix_sync(a, Aw + warp * 16 * kLdC + kk, kLdC);
        wmma::load_matrix_sync(b, Ks + kk * kLdK + ct * 16, kLdK);
        wmma::mma_sync(acc, a, b, acc);
      }
      wmma::store_matrix_sync(Stg + warp * 16 * kLdKf + ct * 16, acc, kLdKf, wmma::mem_row_major);
    }
  }
  __syncthreads();
  for (int e = threadIdx.x; e < L * dk; e += kThreads) {
    const int i = e / dk, c = e % dk;
    W[((t0 + i) * H + h) * dk + c] = __float2bfloat16_rn(Stg[i * kLdKf + c]);
  }
  __syncthreads();

  // u = Ab V, in slabs of 64 value columns.
  for (int c0 = 0; c0 < dv; c0 += kC) {
    const int nc = min(kC, dv - c0);
    detail::load_tile_bf16(Vs, kLdC, v + (t0 * H + h) * dv + c0, H * dv, L, nc, kC, kC);
    __syncthreads();
#pragma unroll
    for (int ct = 0; ct < 4; ++ct) {
      FragC acc;
      wmma::fill_fragment(acc, 0.0f);
#pragma unroll
      for (int kk = 0; kk < kC; kk += 16) {
        FragA a;
        FragB b;
        wmma::load_matrix_sync(a, Ab + warp * 16 * kLdC + kk, kLdC);
        wmma::load_matrix_sync(b, Vs + kk * kLdC + ct * 16, kLdC);
        wmma::mma_sync(acc, a, b, acc);
      }
      wmma::store_matrix_sync(Stg + warp * 16 * kLdKf + ct * 16, acc, kLdKf, wmma::mem_row_major);
    }
    __syncthreads();
    for (int e = threadIdx.x; e < L * nc; e += kThreads) {
      const int i = e / nc, c = e % nc;
      U[((t0 + i) * H + h) * dv + c0 + c] = __float2bfloat16_rn(Stg[i * kLdKf + c]);
    }
    __syncthreads();
  }
}

// ---------------------------------------------------------------------------------------------------
// Kernel 2: per (column block, head, sequence), sequential over the chunks.

template <int DK>
struct StateSmem {
  static constexpr int kLdK = DK + 8;
  static constexpr int kLdV = kBV + 8, kLdVf = kBV + 4;
  static constexpr size_t ws = 0;
  static constexpr size_t ks = align128(ws + sizeof(__nv_bfloat16) * kC * kLdK);
  static constexpr size_t qs = align128(ks + sizeof(__nv_bfloat16) * kC * kLdK);
  static constexpr size_t st = align128(qs + sizeof(__nv_bfloat16) * kC * kLdK);
  static constexpr size_t sb = align128(st + sizeof(float) * DK * kLdVf);
  static constexpr size_t ust = align128(sb + sizeof(__nv_bfloat16) * DK * kLdV);
  static constexpr size_t vst = align128(ust + sizeof(float) * kC * kLdVf);
  static constexpr size_t ost = align128(vst + sizeof(float) * kC * kLdVf);
  static constexpr size_t vn = align128(ost + sizeof(float) * kC * kLdVf);
  static constexpr size_t vd = align128(vn + sizeof(__nv_bfloat16) * kC * kLdV);
  static constexpr size_t qk = align128(vd + sizeof(__nv_bfloat16) * kC * kLdV);
  static constexpr size_t pm = align128(qk + sizeof(float) * kC * kLdCf);
  static constexpr size_t gs = align128(pm + sizeof(__nv_bfloat16) * kC * kLdC);
  static constexpr size_t bytes = align128(gs + sizeof(float) * kC);
};

template <int DK>
__global__ void __launch_bounds__(kThreads) gdn_state_kernel(GdnShape s, const bf16* __restrict__ q,
                                                             const bf16* __restrict__ k,
                                                             const bf16* __restrict__ W, const bf16* __restrict__ U,
                                                             const float* __restrict__ Gc,
                                                             const int32_t* __restrict__ cu, float* state,
                                                             bf16* __restrict__ out, float* transfer) {
  using SM = StateSmem<DK>;
  constexpr int kLdK = SM::kLdK, kLdV = SM::kLdV, kLdVf = SM::kLdVf;
  extern __shared__ __align__(128) unsigned char smem[];
  bf16* Ws = reinterpret_cast<bf16*>(smem + SM::ws);
  bf16* Ks = reinterpret_cast<bf16*>(smem + SM::ks);
  bf16* Qs = reinterpret_cast<bf16*>(smem + SM::qs);
  float* St = reinterpret_cast<float*>(smem + SM::st);
  bf16* Sb = reinterpret_cast<bf16*>(smem + SM::sb);
  float* Ust = reinterpret_cast<float*>(smem + SM::ust);
  float* Vst = reinterpret_cast<float*>(smem + SM::vst);
  float* Ost = reinterpret_cast<float*>(smem + SM::ost);
  bf16* Vn = reinterpret_cast<bf16*>(smem + SM::vn);
  bf16* Vd = reinterpret_cast<bf16*>(smem + SM::vd);
  float* QK = reinterpret_cast<float*>(smem + SM::qk);
  bf16* Pm = reinterpret_cast<bf16*>(smem + SM::pm);
  float* Gs = reinterpret_cast<float*>(smem + SM::gs);

  const int64_t n = blockIdx.z, h = blockIdx.y;
  const int64_t H = s.H, kh = h / (s.H / s.Hk);
  const int dk = int(s.dk), dv = int(s.dv);
  const int nsb = (dv + kBV - 1) / kBV;
  const bool is_T = int(blockIdx.x) >= nsb;  // a block of transfer-operator columns
  const int c0 = (is_T ? int(blockIdx.x) - nsb : int(blockIdx.x)) * kBV;
  const int width = is_T ? dk : dv;  // columns of the matrix this block evolves
  const int ncols = min(kBV, width - c0);
  const bool want_out = !is_T && out != nullptr;
  float* M = is_T ? transfer + (n * H + h) * dk * dk : state + (n * H + h) * dk * dv;
  const int warp = threadIdx.x / 32;

  for (int e = threadIdx.x; e < DK * kBV; e += kThreads) {
    const int i = e / kBV, c = e % kBV;
    St[i * kLdVf + c] = (i < dk && c < ncols) ? M[int64_t(i) * width + c0 + c] : 0.0f;
  }
  const SeqRange sr = seq_range(cu, n, s.T);
  for (int64_t t0 = sr.bos; t0 < sr.eos; t0 += kC) {
    const int L = int((sr.eos - t0 < kC ? sr.eos - t0 : kC));
    // Stage the chunk: W, K (and Q), the pseudo-values u of this column block, decays; S as bf16.
    detail::load_tile_bf16(Ws, kLdK, W + (t0 * H + h) * dk, H * dk, L, dk, kC, DK);
    detail::load_tile_bf16(Ks, kLdK, k + (t0 * s.Hk + kh) * dk, s.Hk * dk, L, dk, kC, DK);
    if (want_out) detail::load_tile_bf16(Qs, kLdK, q + (t0 * s.Hk + kh) * dk, s.Hk * dk, L, dk, kC, DK);
    for (int e = threadIdx.x; e < kC * kBV; e += kThreads) {
      const int i = e / kBV, c = e % kBV;
      Ust[i * kLdVf + c] =
          (!is_T && i < L && c < ncols) ? __bfloat162float(U[((t0 + i) * H + h) * dv + c0 + c]) : 0.0f;
    }
    for (int i = threadIdx.x; i < kC; i += kThreads) Gs[i] = Gc[(t0 + min(i, L - 1)) * H + h];
    for (int e = threadIdx.x; e < DK * kBV; e += kThreads) {
      const int i = e / kBV, c = e % kBV;
      Sb[i * kLdV + c] = __float2bfloat16_rn(St[i * kLdVf + c]);
    }
    __syncthreads();

    // W S0 -> Vst; Q S0 -> Ost; Q K^T -> QK (row tile = warp).
    {
      FragC acc[2];
      wmma::fill_fragment(acc[0], 0.0f);
      wmma::fill_fragment(acc[1], 0.0f);
#pragma unroll
      for (int kk = 0; kk < DK; kk += 16) {
        FragA a;
        wmma::load_matrix_sync(a, Ws + warp * 16 * kLdK + kk, kLdK);
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          FragB b;
          wmma::load_matrix_sync(b, Sb + kk * kLdV + j * 16, kLdV);
          wmma::mma_sync(acc[j], a, b, acc[j]);
        }
      }
#pragma unroll
      for (int j = 0; j < 2; ++j)
        wmma::store_matrix_sync(Vst + warp * 16 * kLdVf + j * 16, acc[j], kLdVf, wmma::mem_row_major);
    }
    if (want_out) {
      FragC acc[2], qk[4];
#pragma unroll
      for (int j = 0; j < 2; ++j) wmma::fill_fragment(acc[j], 0.0f);
#pragma unroll
      for (int j = 0; j < 4; ++j) wmma::fill_fragment(qk[j], 0.0f);
#pragma unroll
      for (int kk = 0; kk < DK; kk += 16) {
        FragA a;
        wmma::load_matrix_sync(a, Qs + warp * 16 * kLdK + kk, kLdK);
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          FragB b;
          wmma::load_matrix_sync(b, Sb + kk * kLdV + j * 16, kLdV);
          wmma::mma_sync(acc[j], a, b, acc[j]);
        }
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          FragBc b;
          wmma::load_matrix_sync(b, Ks + j * 16 * kLdK + kk, kLdK);
          wmma::mma_sync(qk[j], a, b, qk[j]);
        }
      }
#pragma unroll
      for (int j = 0; j < 2; ++j)
        wmma::store_matrix_sync(Ost + warp * 16 * kLdVf + j * 16, acc[j], kLdVf, wmma::mem_row_major);
#pragma unroll
      for (int j = 0; j < 4; ++j)
        wmma::store_matrix_sync(QK + warp * 16 * kLdCf + j * 16, qk[j], kLdCf, wmma::mem_row_major);
    }
    __syncthreads();

    // Vn = u - W S0; Vd = diag(exp(G_L - G_j)) Vn; O rows scaled by exp(G_i); P = tril(QK) o decay.
    const float gL = Gs[L - 1];
    for (int e = threadIdx.x; e < kC * kBV; e += kThreads) {
      const int i = e / kBV, c = e % kBV;
      const float vn = Ust[i * kLdVf + c] - Vst[i * kLdVf + c];
      Vn[i * kLdV + c] = __float2bfloat16_rn(vn);
      Vd[i * kLdV + c] = __float2bfloat16_rn(i < L ? vn * expf(gL - Gs[i]) : 0.0f);
      if (want_out) Ost[i * kLdVf + c] *= expf(Gs[i]);
    }
    if (want_out) {
      for (int e = threadIdx.x; e < kC * kC; e += kThreads) {
        const int i = e / kC, j = e % kC;
        Pm[i * kLdC + j] = __float2bfloat16_rn((j <= i && i < L) ? QK[i * kLdCf + j] * expf(Gs[i] - Gs[j]) : 0.0f);
      }
    }
    __syncthreads();

    // O += P Vn.
    if (want_out) {
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        FragC acc;
        wmma::load_matrix_sync(acc, Ost + warp * 16 * kLdVf + j * 16, kLdVf, wmma::mem_row_major);
#pragma unroll
        for (int kk = 0; kk < kC; kk += 16) {
          FragA a;
          FragB b;
          wmma::load_matrix_sync(a, Pm + warp * 16 * kLdC + kk, kLdC);
          wmma::load_matrix_sync(b, Vn + kk * kLdV + j * 16, kLdV);
          wmma::mma_sync(acc, a, b, acc);
        }
        wmma::store_matrix_sync(Ost + warp * 16 * kLdVf + j * 16, acc, kLdVf, wmma::mem_row_major);
      }
    }
    // S = exp(G_L) S0 + K^T Vd: warp w owns state row tiles w, w + 4, ...
    const float eL = expf(gL);
    for (int rt = warp; rt < DK / 16; rt += kThreads / 32) {
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        FragC acc;
        wmma::load_matrix_sync(acc, St + rt * 16 * kLdVf + j * 16, kLdVf, wmma::mem_row_major);
#pragma unroll
        for (int x = 0; x < acc.num_elements; ++x) acc.x[x] *= eL;
#pragma unroll
        for (int kk = 0; kk < kC; kk += 16) {
          FragAc a;
          FragB b;
          wmma::load_matrix_sync(a, Ks + kk * kLdK + rt * 16, kLdK);
          wmma::load_matrix_sync(b, Vd + kk * kLdV + j * 16, kLdV);
          wmma::mma_sync(acc, a, b, acc);
        }
        wmma::store_matrix_sync(St + rt * 16 * kLdVf + j * 16, acc, kLdVf, wmma::mem_row_major);
      }
    }
    __syncthreads();
    if (want_out) {
      for (int e = threadIdx.x; e < L * kBV; e += kThreads) {
        const int i = e / kBV, c = e % kBV;
        if (c < ncols) out[((t0 + i) * H + h) * dv + c0 + c] = __float2bfloat16_rn(Ost[i * kLdVf + c]);
      }
    }
  }
  __syncthreads();
  for (int e = threadIdx.x; e < dk * kBV; e += kThreads) {
    const int i = e / kBV, c = e % kBV;
    if (c < ncols) M[int64_t(i) * width + c0 + c] = St[i * kLdVf + c];
  }
}

struct Workspace {
  bf16* W;
  bf16* U;
  float* Gc;
};

Workspace carve(const GdnShape& s, void* ws) {
  auto* base = static_cast<unsigned char*>(ws);
  const size_t w_bytes = align128(sizeof(bf16) * s.T * s.H * s.dk);
  const size_t u_bytes = align128(sizeof(bf16) * s.T * s.H * s.dv);
  return {reinterpret_cast<bf16*>(base), reinterpret_cast<bf16*>(base + w_bytes),
          reinterpret_cast<float*>(base + w_bytes + u_bytes)};
}

template <int DK>
void launch(const GdnShape& s, const bf16* q, const bf16* k, const bf16* v, const float* g, const float* beta,
            const int32_t* cu, int64_t max_seqlen, float* state, bf16* out, float* transfer, void* workspace,
            cudaStream_t stream) {
  const Workspace w = carve(s, workspace);
  const int64_t max_chunks = (max_seqlen + kC - 1) / kC;
  HYPIC_CUDA_REQUIRE(max_chunks < (int64_t{1} << 31) && s.H <= 65535 && s.N <= 65535,
                     "gdn_chunked_prefill: grid too large");
  const size_t prep_smem = PrepSmem<DK>::bytes, state_smem = StateSmem<DK>::bytes;
  HYPIC_CUDA_CHECK(cudaFuncSetAttribute(gdn_prep_kernel<DK>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        int(prep_smem)));
  HYPIC_CUDA_CHECK(cudaFuncSetAttribute(gdn_state_kernel<DK>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        int(state_smem)));
  gdn_prep_kernel<DK><<<dim3(unsigned(max_chunks), unsigned(s.H), unsigned(s.N)), kThreads, prep_smem, stream>>>(
      s, k, v, g, beta, cu, w.W, w.U, w.Gc);
  HYPIC_CUDA_LAUNCH_CHECK();
  const int blocks = int((s.dv + kBV - 1) / kBV + (transfer ? (s.dk + kBV - 1) / kBV : 0));
  gdn_state_kernel<DK><<<dim3(unsigned(blocks), unsigned(s.H), unsigned(s.N)), kThreads, state_smem, stream>>>(
      s, q, k, w.W, w.U, w.Gc, cu, state, out, transfer);
  HYPIC_CUDA_LAUNCH_CHECK();
}

}  // namespace

size_t gdn_chunked_workspace_bytes(const GdnShape& s) {
  return align128(sizeof(bf16) * s.T * s.H * s.dk) + align128(sizeof(bf16) * s.T * s.H * s.dv) +
         align128(sizeof(float) * s.T * s.H);
}

void gdn_chunked_prefill(const GdnShape& s, const bf16* q, const bf16* k, const bf16* v, const float* g,
                         const float* beta, const int32_t* cu_seqlens, int64_t max_seqlen, float* state, bf16* out,
                         float* transfer, void* workspace, cudaStream_t stream) {
  HYPIC_CUDA_REQUIRE(s.H > 0 && s.Hk > 0 && s.H % s.Hk == 0, "gdn_chunked_prefill: H must be a multiple of Hk");
  HYPIC_CUDA_REQUIRE(s.dk > 0 && s.dk <= 128, "gdn_chunked_prefill: key dim must be in [1, 128]");
  HYPIC_CUDA_REQUIRE(s.dv > 0, "gdn_chunked_prefill: value dim must be positive");
  HYPIC_CUDA_REQUIRE(s.N >= 1 && (s.N == 1 || cu_seqlens != nullptr),
                     "gdn_chunked_prefill: several sequences need cu_seqlens");
  HYPIC_CUDA_REQUIRE(max_seqlen >= 0 && (cu_seqlens != nullptr || max_seqlen == s.T),
                     "gdn_chunked_prefill: max_seqlen must equal T for one sequence");
  if (s.T == 0 || max_seqlen == 0) return;
  if (s.dk <= 64)
    launch<64>(s, q, k, v, g, beta, cu_seqlens, max_seqlen, state, out, transfer, workspace, stream);
  else
    launch<128>(s, q, k, v, g, beta, cu_seqlens, max_seqlen, state, out, transfer, workspace, stream);
}

}  // namespace hypic::cuda
