// Chunked KDA prefill: kda_prep (kernels/cuda/kda_prep.cu) then the chunk walk below. The walk has one
// block per (32 state columns, head, sequence), plus, when the transfer operator is wanted, one per 32 of
// its dk columns: the operator evolves exactly like a state with zero values (kernels/cuda/kda_common.cuh),
// so those blocks run the same loop with V = 0 and no outputs. Per chunk, on tensor cores, with the block's
// state columns in registers (fp32 accumulators) and mirrored in shared memory as bf16:
//   R = V - Kt S0,  Delta = M R,  O = Qt S0 + Aqk Delta,  S = diag(e^Gam_L) S0 + Kb^T Delta
// The next chunk's tiles are fetched with cp.async while the current one is computed.
#include "kernels/cuda/check.h"
#include "kernels/cuda/kda.h"
#include "kernels/cuda/kda_common.cuh"
#include "kernels/cuda/smem_limit.h"

namespace hypic::cuda {
namespace kda {
namespace {

constexpr int kBV = 32;  // state columns per block
constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;

using detail::mma_bf16_16816;

template <int DK>
struct WalkSmem {
  bf16 qt[2][kC][DK + 8];
  bf16 kt[2][kC][DK + 8];
  bf16 kb[2][kC][DK + 8];
  bf16 m[2][kC][kC + 8];
  bf16 aqk[2][kC][kC + 8];
  bf16 v[2][kC][kBV + 8];
  float gl[2][DK];
  bf16 s[DK][kBV + 8];  // the chunk's start state block
  bf16 r[kC][kBV + 8];  // V - Kt S0
  bf16 d[kC][kBV + 8];  // Delta
};

template <int DK>
__global__ void __launch_bounds__(kThreads) kda_walk_kernel(GdnShape s, const bf16* __restrict__ v,
                                                            const int32_t* __restrict__ cu, float* state,
                                                            bf16* __restrict__ out, float* transfer,
                                                            int state_blocks, Workspace w) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  auto& sm = *reinterpret_cast<WalkSmem<DK>*>(smem_raw);
  constexpr int LDK = DK + 8, LDC = kC + 8, LDV = kBV + 8;
  constexpr int MT = DK / 64;  // 16-row state tiles per warp: warp w owns rows [w DK/4, (w+1) DK/4)
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int64_t n = blockIdx.z, h = blockIdx.y;
  const int dk = int(s.dk), dv = int(s.dv);
  const int64_t H = s.H;
  // A state block (values, outputs) or a transfer block (zero values, no outputs).
  const bool is_state = int(blockIdx.x) < state_blocks;
  const int col0 = (is_state ? int(blockIdx.x) : int(blockIdx.x) - state_blocks) * kBV;
  const int ld = is_state ? dv : dk;  // row stride of the evolved matrix
  const int cols = min(kBV, ld - col0);
  float* S = is_state ? state + (n * H + h) * int64_t(dk) * dv : transfer + (n * H + h) * int64_t(dk) * dk;
  const bool want_out = is_state && out != nullptr;
  const gdn::SeqRange r = gdn::seq_range(cu, n, s.T);
  const int64_t len = r.eos - r.bos;
  if (len <= 0) return;

  float sacc[MT][4][4];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int nt = 0; nt < 4; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int row = warp * (DK / 4) + mt * 16 + g + (e / 2) * 8, col = nt * 8 + 2 * t + e % 2;
        sacc[mt][nt][e] = (row < dk && col < cols) ? S[int64_t(row) * ld + col0 + col] : 0.0f;
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
  if (!is_state)
    for (int e = threadIdx.x; e < 2 * kC * LDV; e += kThreads) (&sm.v[0][0][0])[e] = __float2bfloat16_rn(0.0f);

  const int64_t slot0 = h * w.slots + gdn::first_slot(r.bos, n);
  auto load_chunk = [&](int64_t c, int buf) {
    const int64_t tile = slot0 + c;
    if (want_out) {
      gdn::load_tile_full<kThreads, kC, DK>(&sm.qt[buf][0][0], LDK, w.Qt + tile * kC * DK, DK);
      gdn::load_tile_full<kThreads, kC, kC>(&sm.aqk[buf][0][0], LDC, w.Aqk + tile * kC * kC, kC);
    }
    gdn::load_tile_full<kThreads, kC, DK>(&sm.kt[buf][0][0], LDK, w.Kt + tile * kC * DK, DK);
    gdn::load_tile_full<kThreads, kC, DK>(&sm.kb[buf][0][0], LDK, w.Kb + tile * kC * DK, DK);
    gdn::load_tile_full<kThreads, kC, kC>(&sm.m[buf][0][0], LDC, w.M + tile * kC * kC, kC);
    if (threadIdx.x < DK / 4) gdn::cp_async16(&sm.gl[buf][threadIdx.x * 4], w.GL + tile * DK + threadIdx.x * 4, true);
    if (is_state) {
      const int64_t t0 = r.bos + c * kC;
      const int rows = int(r.eos - t0 < kC ? r.eos - t0 : kC);
      gdn::load_tile<kThreads, kC, kBV>(&sm.v[buf][0][0], LDV, v + (t0 * H + h) * dv + col0, H * dv, rows, cols);
    }
    gdn::cp_async_commit();
  };

  const int64_t chunks = (len + kC - 1) / kC;
  const int i0 = warp * 16 + g, i1 = i0 + 8;  // the warp's chunk rows in R, Delta and O
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

    // R = V - Kt S0 (the warp's 16 rows)
    {
      float acc[4][4] = {};
#pragma unroll
      for (int k0 = 0; k0 < DK; k0 += 16) {
        uint32_t a[4];
        gdn::frag_a(a, &sm.kt[buf][0][0], LDK, warp * 16, k0);
#pragma unroll
        for (int n0 = 0; n0 < kBV; n0 += 16) {
          uint32_t b0[2], b1[2];
          gdn::frag_b_kn(b0, b1, &sm.s[0][0], LDV, k0, n0);
          mma_bf16_16816(acc[n0 / 8], a, b0);
          mma_bf16_16816(acc[n0 / 8 + 1], a, b1);
        }
      }
#pragma unroll
      for (int nt = 0; nt < 4; ++nt) {
        const int col = nt * 8 + 2 * t;
        gdn::st_bf16x2(&sm.r[i0][col], __bfloat162float(sm.v[buf][i0][col]) - acc[nt][0],
                       __bfloat162float(sm.v[buf][i0][col + 1]) - acc[nt][1]);
        gdn::st_bf16x2(&sm.r[i1][col], __bfloat162float(sm.v[buf][i1][col]) - acc[nt][2],
                       __bfloat162float(sm.v[buf][i1][col + 1]) - acc[nt][3]);
      }
    }
    __syncthreads();
    // Delta = M R
    {
      float acc[4][4] = {};
#pragma unroll
      for (int k0 = 0; k0 < kC; k0 += 16) {
        uint32_t a[4];
        gdn::frag_a(a, &sm.m[buf][0][0], LDC, warp * 16, k0);
#pragma unroll
        for (int n0 = 0; n0 < kBV; n0 += 16) {
          uint32_t b0[2], b1[2];
          gdn::frag_b_kn(b0, b1, &sm.r[0][0], LDV, k0, n0);
          mma_bf16_16816(acc[n0 / 8], a, b0);
          mma_bf16_16816(acc[n0 / 8 + 1], a, b1);
        }
      }
#pragma unroll
      for (int nt = 0; nt < 4; ++nt) {
        const int col = nt * 8 + 2 * t;
        gdn::st_bf16x2(&sm.d[i0][col], acc[nt][0], acc[nt][1]);
        gdn::st_bf16x2(&sm.d[i1][col], acc[nt][2], acc[nt][3]);
      }
    }
    __syncthreads();
    // O = Qt S0 + Aqk Delta
    if (want_out) {
      float acc[4][4] = {};
#pragma unroll
      for (int k0 = 0; k0 < DK; k0 += 16) {
        uint32_t a[4];
        gdn::frag_a(a, &sm.qt[buf][0][0], LDK, warp * 16, k0);
#pragma unroll
        for (int n0 = 0; n0 < kBV; n0 += 16) {
          uint32_t b0[2], b1[2];
          gdn::frag_b_kn(b0, b1, &sm.s[0][0], LDV, k0, n0);
          mma_bf16_16816(acc[n0 / 8], a, b0);
          mma_bf16_16816(acc[n0 / 8 + 1], a, b1);
        }
      }
#pragma unroll
      for (int k0 = 0; k0 < kC; k0 += 16) {
        uint32_t a[4];
        gdn::frag_a(a, &sm.aqk[buf][0][0], LDC, warp * 16, k0);
#pragma unroll
        for (int n0 = 0; n0 < kBV; n0 += 16) {
          uint32_t b0[2], b1[2];
          gdn::frag_b_kn(b0, b1, &sm.d[0][0], LDV, k0, n0);
          mma_bf16_16816(acc[n0 / 8], a, b0);
          mma_bf16_16816(acc[n0 / 8 + 1], a, b1);
        }
      }
      const int64_t t0 = r.bos + c * kC;
      const int L = int(len - c * kC < kC ? len - c * kC : kC);
#pragma unroll
      for (int nt = 0; nt < 4; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int i = e < 2 ? i0 : i1, col = nt * 8 + 2 * t + e % 2;
          if (i < L && col < cols) out[((t0 + i) * H + h) * dv + col0 + col] = __float2bfloat16_rn(acc[nt][e]);
        }
    }
    // S = diag(e^Gam_L) S0 + Kb^T Delta
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      const int row = warp * (DK / 4) + mt * 16 + g;
      const float d0 = sm.gl[buf][row], d1 = sm.gl[buf][row + 8];
#pragma unroll
      for (int nt = 0; nt < 4; ++nt) {
        sacc[mt][nt][0] *= d0, sacc[mt][nt][1] *= d0, sacc[mt][nt][2] *= d1, sacc[mt][nt][3] *= d1;
      }
    }
#pragma unroll
    for (int kk = 0; kk < kC / 16; ++kk)
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        uint32_t a[4];
        gdn::frag_a_t(a, &sm.kb[buf][0][0], LDK, warp * (DK / 4) + mt * 16, kk * 16);
#pragma unroll
        for (int n0 = 0; n0 < kBV; n0 += 16) {
          uint32_t b0[2], b1[2];
          gdn::frag_b_kn(b0, b1, &sm.d[0][0], LDV, kk * 16, n0);
          mma_bf16_16816(sacc[mt][n0 / 8], a, b0);
          mma_bf16_16816(sacc[mt][n0 / 8 + 1], a, b1);
        }
      }
    __syncthreads();  // every warp is done with this chunk's tiles, R, Delta and the old state block
    state_to_smem();
  }

#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int nt = 0; nt < 4; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int row = warp * (DK / 4) + mt * 16 + g + (e / 2) * 8, col = nt * 8 + 2 * t + e % 2;
        if (row < dk && col < cols) S[int64_t(row) * ld + col0 + col] = sacc[mt][nt][e];
      }
}

template <int DK>
void launch(const GdnShape& s, const bf16* v, const int32_t* cu, float* state, bf16* out, float* transfer,
            const Workspace& w, cudaStream_t stream) {
  const size_t smem = sizeof(WalkSmem<DK>);
  raise_smem_limit(kda_walk_kernel<DK>, smem);
  const int state_blocks = state ? int((s.dv + kBV - 1) / kBV) : 0;
  const int transfer_blocks = transfer ? int((s.dk + kBV - 1) / kBV) : 0;
  const dim3 grid(unsigned(state_blocks + transfer_blocks), unsigned(s.H), unsigned(s.N));
  kda_walk_kernel<DK><<<grid, kThreads, smem, stream>>>(s, v, cu, state, out, transfer, state_blocks, w);
  HYPIC_CUDA_LAUNCH_CHECK();
}

}  // namespace

void launch_walk(const GdnShape& s, const bf16* v, const int32_t* cu, float* state, bf16* out, float* transfer,
                 const Workspace& w, cudaStream_t stream) {
  if (w.dkp == 64)
    launch<64>(s, v, cu, state, out, transfer, w, stream);
  else
    launch<128>(s, v, cu, state, out, transfer, w, stream);
}

}  // namespace kda

size_t kda_chunked_workspace_bytes(const GdnShape& s) { return kda::workspace_bytes(s); }

void kda_chunked_prefill(const GdnShape& s, const bf16* q, const bf16* k, const bf16* v, const float* g,
                         const float* beta, const int32_t* cu_seqlens, int64_t max_seqlen, float* state, bf16* out,
                         float* transfer, void* workspace, cudaStream_t stream) {
  HYPIC_CUDA_REQUIRE(s.H > 0 && s.Hk > 0 && s.H % s.Hk == 0, "kda_chunked_prefill: H must be a multiple of Hk");
  HYPIC_CUDA_REQUIRE(s.dk > 0 && s.dk <= 128, "kda_chunked_prefill: key dim must be in [1, 128]");
  HYPIC_CUDA_REQUIRE(s.dv > 0, "kda_chunked_prefill: value dim must be positive");
  HYPIC_CUDA_REQUIRE(s.N >= 1 && (s.N == 1 || cu_seqlens != nullptr),
                     "kda_chunked_prefill: several sequences need cu_seqlens");
  HYPIC_CUDA_REQUIRE(max_seqlen >= 0 && (cu_seqlens != nullptr || max_seqlen == s.T),
                     "kda_chunked_prefill: max_seqlen must equal T for one sequence");
  HYPIC_CUDA_REQUIRE(state != nullptr || (out == nullptr && transfer != nullptr),
                     "kda_chunked_prefill: outputs need the state; without it only the transfer operator is built");
  if (s.T == 0 || max_seqlen == 0 || (state == nullptr && transfer == nullptr)) return;
  const int64_t max_chunks = (max_seqlen + kda::kC - 1) / kda::kC;
  HYPIC_CUDA_REQUIRE(max_chunks < (int64_t{1} << 31) && s.H <= 65535 && s.N <= 65535,
                     "kda_chunked_prefill: grid too large");
  const kda::Workspace w = kda::carve(s, workspace);
  kda::launch_prep(s, q, k, g, beta, cu_seqlens, max_chunks, out != nullptr, w, stream);
  kda::launch_walk(s, v, cu_seqlens, state, out, transfer, w, stream);
}

}  // namespace hypic::cuda
