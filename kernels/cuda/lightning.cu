// Lightning attention (scalar per-head decay) on device: chunked prefill and the decode step.
//
// Chunked prefill: one block per (32 state columns, head, sequence) walks the sequence's chunks of 64
// rows in order, the state block held in registers as mma accumulators (fp32) and mirrored in shared
// memory as bf16 for the output product. With a = e^lambda, L the rows of the chunk and S0 its start state:
//   O   = diag(a^(i+1)) Q S0 + (Q K^T o D) V,     D_ij = a^(i-j) for j <= i, 0 above the diagonal
//   S_L = a^L S0 + K^T diag(a^(L-1-j)) V
// Every power of a is <= 1, so strong decay only underflows to 0. The next chunk's q/k/v tiles are
// fetched with cp.async while the current one is computed. Q K^T is recomputed by each column block of
// a head (dv / 32 of them): that redundancy buys parallelism for single long sequences.
//
// Decode: as gdn_recurrent (kernels/cuda/delta_rule_recurrent.cu), a block per (32 columns, head, sequence)
// holds its state columns in registers, warp w rows [32w, 32w + 32).
#include <algorithm>

#include "kernels/cuda/check.h"
#include "kernels/cuda/gdn_common.cuh"
#include "kernels/cuda/lightning.h"
#include "kernels/cuda/smem_limit.h"

namespace hypic::cuda {
namespace {

constexpr int kC = 64;   // chunk rows
constexpr int kBV = 32;  // state columns per block
constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;

using detail::mma_bf16_16816;
using detail::pack_bf16;

// Row strides padded by 8 bf16 (16 bytes): ldmatrix rows of consecutive tile rows fall in distinct banks.
template <int DK>
struct ChunkSmem {
  bf16 q[2][kC][DK + 8];
  bf16 k[2][kC][DK + 8];
  bf16 v[2][kC][kBV + 8];
  bf16 vd[kC][kBV + 8];  // V rows scaled by a^(L-1-j), the state update's right operand
  bf16 s[DK][kBV + 8];   // the chunk's start state block, bf16
  float pw[kC + 1];      // a^n for n = 0..64: the decay is constant per head
};

template <int DK>
__global__ void __launch_bounds__(kThreads) lightning_chunked_kernel(GdnShape s, const bf16* __restrict__ q,
                                                                     const bf16* __restrict__ k,
                                                                     const bf16* __restrict__ v,
                                                                     const float* __restrict__ log_decay,
                                                                     const int32_t* __restrict__ cu, float* state,
                                                                     bf16* __restrict__ out) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  auto& sm = *reinterpret_cast<ChunkSmem<DK>*>(smem_raw);
  constexpr int LDK = DK + 8, LDV = kBV + 8;
  constexpr int MT = DK / 64;  // 16-row state tiles per warp: warp w owns rows [w DK/4, (w+1) DK/4)
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int64_t n = blockIdx.z, h = blockIdx.y;
  const int col0 = blockIdx.x * kBV;
  const int dk = int(s.dk), dv = int(s.dv), cols = min(kBV, dv - col0);
  const int64_t H = s.H, Hk = s.Hk, kh = h / (H / Hk);
  const gdn::SeqRange r = gdn::seq_range(cu, n, s.T);
  const int64_t len = r.eos - r.bos;
  if (len <= 0) return;  // the state passes through unchanged
  const float lam = log_decay[h];
  for (int e = threadIdx.x; e <= kC; e += kThreads) sm.pw[e] = expf(lam * float(e));  // read after the loop's barrier
  float* S = state + (n * H + h) * int64_t(dk) * dv;

  float sacc[MT][4][4];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int nt = 0; nt < 4; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int row = warp * (DK / 4) + mt * 16 + g + (e / 2) * 8, col = nt * 8 + 2 * t + e % 2;
        sacc[mt][nt][e] = (row < dk && col < cols) ? S[int64_t(row) * dv + col0 + col] : 0.0f;
      }
  auto state_to_smem = [&] {
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int nt = 0; nt < 4; ++nt) {
        const int row = warp * (DK / 4) + mt * 16 + g, col = nt * 8 + 2 * t;
        gdn::st_bf16x2(&sm.s[row][col], sacc[mt][nt][0], sacc[mt][nt][1]);
        gdn::st_bf16x2(&sm.s[row + 8][col], sacc[mt][nt][2], sacc[mt][nt][3]);
      }
  };
  state_to_smem();

  const bool want_out = out != nullptr;
  auto load_chunk = [&](int64_t c, int buf) {
    const int64_t t0 = r.bos + c * kC;
    const int rows = int(r.eos - t0 < kC ? r.eos - t0 : kC);
    if (want_out) gdn::load_tile<kThreads, kC, DK>(&sm.q[buf][0][0], LDK, q + (t0 * Hk + kh) * dk, Hk * dk, rows, dk);
    gdn::load_tile<kThreads, kC, DK>(&sm.k[buf][0][0], LDK, k + (t0 * Hk + kh) * dk, Hk * dk, rows, dk);
    gdn::load_tile<kThreads, kC, kBV>(&sm.v[buf][0][0], LDV, v + (t0 * H + h) * dv + col0, H * dv, rows, cols);
    gdn::cp_async_commit();
  };

  const int64_t chunks = (len + kC - 1) / kC;
  load_chunk(0, 0);
  for (int64_t c = 0; c < chunks; ++c) {
    const int buf = int(c & 1);
    if (c + 1 < chunks) {
      load_chunk(c + 1, buf ^ 1);
      detail::cp_async_wait<1>();
    } else {
      detail::cp_async_wait<0>();
    }
    __syncthreads();  // chunk c's tiles and the start state are in shared memory
    const int L = int(len - c * kC < kC ? len - c * kC : kC);
    const bf16* Qs = &sm.q[buf][0][0];
    const bf16* Ks = &sm.k[buf][0][0];
    const bf16* Vs = &sm.v[buf][0][0];

    if (want_out) {
      // P = (Q K^T) o D for the warp's 16 rows.
      float p[8][4] = {};
#pragma unroll
      for (int k0 = 0; k0 < DK; k0 += 16) {
        uint32_t a[4];
        gdn::frag_a(a, Qs, LDK, warp * 16, k0);
#pragma unroll
        for (int n0 = 0; n0 < kC; n0 += 16) {
          uint32_t b0[2], b1[2];
          gdn::frag_b_nk(b0, b1, Ks, LDK, k0, n0);
          mma_bf16_16816(p[n0 / 8], a, b0);
          mma_bf16_16816(p[n0 / 8 + 1], a, b1);
        }
      }
      const int i0 = warp * 16 + g, i1 = i0 + 8;
#pragma unroll
      for (int nt = 0; nt < 8; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int i = e < 2 ? i0 : i1, j = nt * 8 + 2 * t + e % 2;
          p[nt][e] = j <= i ? p[nt][e] * sm.pw[max(i - j, 0)] : 0.0f;
        }
      // O = diag(a^(i+1)) Q S0 + P V
      float o[4][4] = {};
#pragma unroll
      for (int k0 = 0; k0 < DK; k0 += 16) {
        uint32_t a[4];
        gdn::frag_a(a, Qs, LDK, warp * 16, k0);
#pragma unroll
        for (int n0 = 0; n0 < kBV; n0 += 16) {
          uint32_t b0[2], b1[2];
          gdn::frag_b_kn(b0, b1, &sm.s[0][0], LDV, k0, n0);
          mma_bf16_16816(o[n0 / 8], a, b0);
          mma_bf16_16816(o[n0 / 8 + 1], a, b1);
        }
      }
      const float e0 = sm.pw[i0 + 1], e1 = sm.pw[i1 + 1];
#pragma unroll
      for (int nt = 0; nt < 4; ++nt) {
        o[nt][0] *= e0, o[nt][1] *= e0, o[nt][2] *= e1, o[nt][3] *= e1;
      }
#pragma unroll
      for (int kk = 0; kk < kC / 16; ++kk) {
        // The accumulators of two adjacent n-tiles are exactly an A fragment of the next product.
        const uint32_t a[4] = {pack_bf16(p[2 * kk][0], p[2 * kk][1]), pack_bf16(p[2 * kk][2], p[2 * kk][3]),
                               pack_bf16(p[2 * kk + 1][0], p[2 * kk + 1][1]),
                               pack_bf16(p[2 * kk + 1][2], p[2 * kk + 1][3])};
#pragma unroll
        for (int n0 = 0; n0 < kBV; n0 += 16) {
          uint32_t b0[2], b1[2];
          gdn::frag_b_kn(b0, b1, Vs, LDV, kk * 16, n0);
          mma_bf16_16816(o[n0 / 8], a, b0);
          mma_bf16_16816(o[n0 / 8 + 1], a, b1);
        }
      }
      const int64_t t0 = r.bos + c * kC;
#pragma unroll
      for (int nt = 0; nt < 4; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int i = e < 2 ? i0 : i1, col = nt * 8 + 2 * t + e % 2;
          if (i < L && col < cols) out[((t0 + i) * H + h) * dv + col0 + col] = __float2bfloat16_rn(o[nt][e]);
        }
    }

    // S_L = a^L S0 + K^T Vd, Vd_j = a^(L-1-j) v_j (rows past L are zero and must stay so: a^(negative)).
    for (int e = threadIdx.x; e < kC * kBV; e += kThreads) {
      const int j = e / kBV, col = e % kBV;
      const float f = j < L ? sm.pw[L - 1 - j] : 0.0f;
      sm.vd[j][col] = __float2bfloat16_rn(f * __bfloat162float(sm.v[buf][j][col]));
    }
    __syncthreads();
    const float aL = sm.pw[L];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int nt = 0; nt < 4; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) sacc[mt][nt][e] *= aL;
#pragma unroll
    for (int kk = 0; kk < kC / 16; ++kk)
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        uint32_t a[4];
        gdn::frag_a_t(a, Ks, LDK, warp * (DK / 4) + mt * 16, kk * 16);
#pragma unroll
        for (int n0 = 0; n0 < kBV; n0 += 16) {
          uint32_t b0[2], b1[2];
          gdn::frag_b_kn(b0, b1, &sm.vd[0][0], LDV, kk * 16, n0);
          mma_bf16_16816(sacc[mt][n0 / 8], a, b0);
          mma_bf16_16816(sacc[mt][n0 / 8 + 1], a, b1);
        }
      }
    __syncthreads();  // every warp is done with this chunk's tiles and the old state block
    state_to_smem();
  }

#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int nt = 0; nt < 4; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int row = warp * (DK / 4) + mt * 16 + g + (e / 2) * 8, col = nt * 8 + 2 * t + e % 2;
        if (row < dk && col < cols) S[int64_t(row) * dv + col0 + col] = sacc[mt][nt][e];
      }
}

template <int DK>
void launch_chunked(const GdnShape& s, const bf16* q, const bf16* k, const bf16* v, const float* log_decay,
                    const int32_t* cu, float* state, bf16* out, cudaStream_t stream) {
  const size_t smem = sizeof(ChunkSmem<DK>);
  raise_smem_limit(lightning_chunked_kernel<DK>, smem);
  const dim3 grid(unsigned((s.dv + kBV - 1) / kBV), unsigned(s.H), unsigned(s.N));
  lightning_chunked_kernel<DK><<<grid, kThreads, smem, stream>>>(s, q, k, v, log_decay, cu, state, out);
  HYPIC_CUDA_LAUNCH_CHECK();
}

constexpr int kRows = 32;  // decode: state rows per warp, dk <= kWarps * kRows = 128

__global__ void __launch_bounds__(kThreads) lightning_recurrent_kernel(GdnShape s, const bf16* __restrict__ q,
                                                                       const bf16* __restrict__ k,
                                                                       const bf16* __restrict__ v,
                                                                       const float* __restrict__ log_decay,
                                                                       float* state, float* const* __restrict__ states,
                                                                       bf16* __restrict__ out) {
  __shared__ float qs[kWarps * kRows], ks[kWarps * kRows];
  __shared__ float part[kWarps][32];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t n = blockIdx.z, h = blockIdx.y;
  const int dk = int(s.dk), dv = int(s.dv);
  const int c = blockIdx.x * 32 + lane;
  const bool col_ok = c < dv;
  const int64_t H = s.H, Hk = s.Hk, kh = h / (H / Hk), T = s.T;
  float* S = (states ? states[n] : state + n * H * dk * dv) + h * dk * dv;
  const float a = expf(log_decay[h]);
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
    const float vt = col_ok ? __bfloat162float(v[(tok * H + h) * dv + c]) : 0.0f;
    float o = 0.0f;
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      reg[r] = a * reg[r] + ks[warp * kRows + r] * vt;
      o += reg[r] * qs[warp * kRows + r];
    }
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

void lightning_chunked_prefill(const GdnShape& s, const bf16* q, const bf16* k, const bf16* v, const float* log_decay,
                               const int32_t* cu_seqlens, int64_t max_seqlen, float* state, bf16* out,
                               cudaStream_t stream) {
  HYPIC_CUDA_REQUIRE(s.H > 0 && s.Hk > 0 && s.H % s.Hk == 0, "lightning_chunked_prefill: H must be a multiple of Hk");
  HYPIC_CUDA_REQUIRE(s.dk > 0 && s.dk <= 128, "lightning_chunked_prefill: key dim must be in [1, 128]");
  HYPIC_CUDA_REQUIRE(s.dv > 0, "lightning_chunked_prefill: value dim must be positive");
  HYPIC_CUDA_REQUIRE(s.N >= 1 && (s.N == 1 || cu_seqlens != nullptr),
                     "lightning_chunked_prefill: several sequences need cu_seqlens");
  HYPIC_CUDA_REQUIRE(max_seqlen >= 0 && (cu_seqlens != nullptr || max_seqlen == s.T),
                     "lightning_chunked_prefill: max_seqlen must equal T for one sequence");
  HYPIC_CUDA_REQUIRE(s.H <= 65535 && s.N <= 65535, "lightning_chunked_prefill: grid too large");
  if (s.T == 0 || max_seqlen == 0) return;
  if (s.dk <= 64)
    launch_chunked<64>(s, q, k, v, log_decay, cu_seqlens, state, out, stream);
  else
    launch_chunked<128>(s, q, k, v, log_decay, cu_seqlens, state, out, stream);
}

void lightning_recurrent(const GdnShape& s, const bf16* q, const bf16* k, const bf16* v, const float* log_decay,
                         float* state, bf16* out, cudaStream_t stream, float* const* states) {
  HYPIC_CUDA_REQUIRE(s.H > 0 && s.Hk > 0 && s.H % s.Hk == 0, "lightning_recurrent: H must be a multiple of Hk");
  HYPIC_CUDA_REQUIRE(s.dk > 0 && s.dk <= kWarps * kRows, "lightning_recurrent: key dim must be in [1, 128]");
  HYPIC_CUDA_REQUIRE(s.dv > 0 && s.N >= 1 && s.N <= 65535 && s.H <= 65535, "lightning_recurrent: bad shape");
  if (s.T == 0) return;
  const dim3 grid(unsigned((s.dv + 31) / 32), unsigned(s.H), unsigned(s.N));
  lightning_recurrent_kernel<<<grid, kThreads, 0, stream>>>(s, q, k, v, log_decay, state, states, out);
  HYPIC_CUDA_LAUNCH_CHECK();
}

}  // namespace hypic::cuda
