// gdn_prep: the chunk-local half of the chunked Gated DeltaNet, one block per (chunk, value head,
// sequence), no dependence between chunks. For a chunk of 64 tokens with in-chunk cumulative log decay G:
//   L = strict-lower(beta_i e^{G_i - G_j} k_i . k_j)      (K K^T on tensor cores)
//   A = (I + L)^-1                                        (blockwise, below)
//   W = A diag(beta e^G) K,   U = A diag(beta) V          (tensor cores, bf16 to the workspace)
// so that the chunk's true pseudo-values are Vn = U - W S0 (the CPU's forward substitution in matrix form). The
// decay scan and the inverse are gdn_prep_inverse.cuh's; on Hopper, gdn_prep_sm90.cu issues the products as
// warpgroup products where it applies.
#include "kernels/cuda/check.h"
#include "kernels/cuda/gdn_common.cuh"
#include "kernels/cuda/gdn_prep_inverse.cuh"
#include "kernels/cuda/smem_limit.h"

namespace hypic::cuda::gdn {
namespace {

using detail::align128;
using detail::mma_bf16_16816;

constexpr int kThreads = 128;  // 4 warps; warp w owns chunk rows 16w..16w+15 of every product

template <int DK>
struct PrepSmem {
  static constexpr int kLdK = DK + 8;   // bf16 K rows (272 or 144 bytes: ldmatrix rows hit distinct banks)
  static constexpr int kLdV = 128 + 8;  // bf16 V rows, 128 value columns per pass
  static constexpr size_t k = 0;                              // K [64][kLdK]; later the W staging tile
  static constexpr size_t v = align128(k + 2 * kC * kLdK);    // V [64][kLdV]; later the U staging tile
  static constexpr size_t a = align128(v + 2 * kC * kLdV);    // L, turned into A in place (fp32 [64][kLdA])
  static constexpr size_t gs = align128(a + 4 * kC * prep::kLdA);  // G
  static constexpr size_t bs = gs + 4 * kC;                   // beta
  static constexpr size_t ws = bs + 4 * kC;                   // beta e^G
  static constexpr size_t bytes = align128(ws + 4 * kC);      // ~53 KB: 4 blocks per SM
};

template <int DK>
__global__ void __launch_bounds__(kThreads, 4) gdn_prep_kernel(GdnShape s, const bf16* __restrict__ q,
                                                            const bf16* __restrict__ k,
                                                            const bf16* __restrict__ v, const float* __restrict__ g,
                                                            const float* __restrict__ beta,
                                                            const int32_t* __restrict__ cu,
                                                            const int32_t* __restrict__ lead, Workspace w,
                                                            int64_t chunk_base, bool heads_fast) {
  using SM = PrepSmem<DK>;
  constexpr int kLdK = SM::kLdK, kLdV = SM::kLdV;
  extern __shared__ __align__(128) unsigned char smem[];
  bf16* Ks = reinterpret_cast<bf16*>(smem + SM::k);
  bf16* Vs = reinterpret_cast<bf16*>(smem + SM::v);
  float* Af = reinterpret_cast<float*>(smem + SM::a);
  float* Gs = reinterpret_cast<float*>(smem + SM::gs);
  float* Bs = reinterpret_cast<float*>(smem + SM::bs);
  float* BWs = reinterpret_cast<float*>(smem + SM::ws);

  const prep::Chunk ch = prep::locate(s, cu, lead, w, chunk_base, heads_fast);
  if (!ch.live) return;
  const int64_t H = s.H, h = ch.h, kh = ch.kh, t0 = ch.t0, tile = ch.tile;
  const int L = ch.L, skip = ch.skip;
  const int dk = int(s.dk), dv = int(s.dv);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, gq = lane / 4, tq = lane % 4;
  const bf16* vsrc = v + (t0 * H + h) * dv;

  // K and the first 128 value columns load while the decays are scanned and K K^T, A are computed. With
  // w.Aqk, Q takes V's tile first (Aqk is computed beside L), and V follows during the inverse.
  const bool want_aqk = w.Aqk != nullptr && q != nullptr && lead == nullptr;
  static_assert(PrepSmem<DK>::kLdV >= DK + 8, "a Q row fits a V row");
  load_tile<kThreads, kC, DK>(Ks, kLdK, k + (t0 * s.Hk + kh) * dk, s.Hk * dk, L, dk);
  if (want_aqk)
    load_tile<kThreads, kC, DK>(Vs, kLdV, q + (t0 * s.Hk + kh) * dk, s.Hk * dk, L, dk);
  else
    load_tile<kThreads, kC, 128>(Vs, kLdV, vsrc, H * dv, L, min(128, dv));
  cp_async_commit();
  if (warp == 0) prep::scan_decay(g, beta, t0, H, h, L, skip, w.G + tile * kC, Gs, Bs, BWs);
  cp_async_wait_all();
  __syncthreads();

  // L = strict-lower(beta_i e^{G_i - G_j} (K K^T)_ij): warp w owns rows 16w..16w+15.
  {
    float acc[8][4] = {};
#pragma unroll
    for (int ks = 0; ks < DK / 16; ++ks) {
      uint32_t a[4];
      frag_a(a, Ks, kLdK, warp * 16, ks * 16);
#pragma unroll
      for (int np = 0; np < 4; ++np) {
        if (np > warp) break;  // L is strictly lower: key tiles right of the diagonal are not needed
        uint32_t b0[2], b1[2];
        frag_b_nk(b0, b1, Ks, kLdK, ks * 16, np * 16);
        mma_bf16_16816(acc[2 * np], a, b0);
        mma_bf16_16816(acc[2 * np + 1], a, b1);
      }
    }
    prep::store_l(Af, [&](int nt, int e) { return acc[nt][e]; }, Gs, Bs, L);
  }
  __syncthreads();

  // Aqk = tril(Q K^T) o e^{G_i - G_j} (diagonal included), for the walk that writes the outputs (gdn_output's
  // P): warp w's rows, Q (in V's tile) and K from shared memory as for L.
  if (want_aqk) {
    float acc[8][4] = {};
#pragma unroll
    for (int ks = 0; ks < DK / 16; ++ks) {
      uint32_t a[4];
      frag_a(a, Vs, kLdV, warp * 16, ks * 16);
#pragma unroll
      for (int np = 0; np < 4; ++np) {
        if (np > warp) break;  // causal: key tiles right of the diagonal are masked out
        uint32_t b0[2], b1[2];
        frag_b_nk(b0, b1, Ks, kLdK, ks * 16, np * 16);
        mma_bf16_16816(acc[2 * np], a, b0);
        mma_bf16_16816(acc[2 * np + 1], a, b1);
      }
    }
    prep::store_aqk(w.Aqk + tile * kC * kC, [&](int nt, int e) { return acc[nt][e]; }, Gs);
  }

  prep::invert_diagonal_blocks(Af);
  __syncthreads();

  if (want_aqk) {  // every warp is done with Q (the barrier above): V takes its tile
    load_tile<kThreads, kC, 128>(Vs, kLdV, vsrc, H * dv, L, min(128, dv));
    cp_async_commit();
  }

  prep::invert_off_diagonal(Af);

  // W = A diag(beta e^G) K and U = A diag(beta) V: A fragments straight from the fp32 tile, scaled and
  // rounded to bf16 on the way (A is lower triangular: k-steps right of the diagonal are skipped, and the
  // upper halves of the diagonal blocks are zero).
  const int r = warp * 16 + gq;
  {
    float acc[DK / 8][4] = {};
#pragma unroll
    for (int ks = 0; ks < kC / 16; ++ks) {
      if (ks > warp) break;
      uint32_t a[4];
      prep::frag_a_scaled(a, Af, ks, BWs);
#pragma unroll
      for (int np = 0; np < DK / 16; ++np) {
        uint32_t b0[2], b1[2];
        frag_b_kn(b0, b1, Ks, kLdK, ks * 16, np * 16);
        mma_bf16_16816(acc[2 * np], a, b0);
        mma_bf16_16816(acc[2 * np + 1], a, b1);
      }
    }
    __syncthreads();  // K consumed: stage W over it
#pragma unroll
    for (int nt = 0; nt < DK / 8; ++nt) {
      st_bf16x2(Ks + r * kLdK + nt * 8 + 2 * tq, acc[nt][0], acc[nt][1]);
      st_bf16x2(Ks + (r + 8) * kLdK + nt * 8 + 2 * tq, acc[nt][2], acc[nt][3]);
    }
  }

  if (want_aqk) {
    cp_async_wait_all();
    __syncthreads();
  }
  // 128 value columns per pass, staged over V.
  for (int c0 = 0; c0 < w.dvp; c0 += 128) {
    const int ncols = int(min(int64_t{128}, w.dvp - c0));  // 64 or 128
    if (c0 > 0) {
      __syncthreads();
      load_tile<kThreads, kC, 128>(Vs, kLdV, vsrc + c0, H * dv, L, min(128, dv - c0));
      cp_async_commit();
      cp_async_wait_all();
      __syncthreads();
    }
    float acc[16][4] = {};
#pragma unroll
    for (int ks = 0; ks < kC / 16; ++ks) {
      if (ks > warp) break;
      uint32_t a[4];
      prep::frag_a_scaled(a, Af, ks, Bs);
#pragma unroll
      for (int np = 0; np < 8; ++np) {
        uint32_t b0[2], b1[2];
        frag_b_kn(b0, b1, Vs, kLdV, ks * 16, np * 16);
        mma_bf16_16816(acc[2 * np], a, b0);
        mma_bf16_16816(acc[2 * np + 1], a, b1);
      }
    }
    __syncthreads();
#pragma unroll
    for (int nt = 0; nt < 16; ++nt) {
      st_bf16x2(Vs + r * kLdV + nt * 8 + 2 * tq, acc[nt][0], acc[nt][1]);
      st_bf16x2(Vs + (r + 8) * kLdV + nt * 8 + 2 * tq, acc[nt][2], acc[nt][3]);
    }
    __syncthreads();
    if (c0 == 0) store_tile16<kThreads, kC, DK>(w.W + tile * kC * DK, DK, Ks, kLdK);
    if (ncols == 128)
      store_tile16<kThreads, kC, 128>(w.UV + tile * kC * w.dvp + c0, w.dvp, Vs, kLdV);
    else
      store_tile16<kThreads, kC, 64>(w.UV + tile * kC * w.dvp + c0, w.dvp, Vs, kLdV);
  }
  if (w.ready != nullptr && lead == nullptr) {  // every thread's stores of the tile, then its flag
    __syncthreads();
    if (threadIdx.x == 0) ready_release(w.ready + kReadyStride * tile);
  }
}

template <int DK>
void launch(const GdnShape& s, const bf16* q, const bf16* k, const bf16* v, const float* g, const float* beta,
            const int32_t* cu, const int32_t* lead, int64_t max_chunks, const Workspace& w, cudaStream_t stream) {
  const unsigned chunks = lead ? 1u : unsigned(max_chunks);
  const dim3 grid(chunks, unsigned(s.H), unsigned(s.N));
  if (DK == 128 && prep_sm90_applies(s, q, k, v, w)) {
    launch_prep_sm90(s, q, k, v, g, beta, cu, lead, grid, 0, false, w, stream);
    return;
  }
  HYPIC_CUDA_REQUIRE(w.V == nullptr, "launch_prep: U formed in the walk needs gdn_prep_sm90 (plan_u_in_walk)");
  const size_t smem = PrepSmem<DK>::bytes;
  raise_smem_limit(gdn_prep_kernel<DK>, smem);
  gdn_prep_kernel<DK><<<grid, kThreads, smem, stream>>>(s, q, k, v, g, beta, cu, lead, w, 0, false);
  HYPIC_CUDA_LAUNCH_CHECK();
}

template <int DK>
void launch_range(const GdnShape& s, const bf16* q, const bf16* k, const bf16* v, const float* g, const float* beta,
                  const int32_t* cu, int64_t c_begin, int64_t c_end, const Workspace& w, cudaStream_t stream) {
  const dim3 grid(unsigned(s.H), unsigned(c_end - c_begin), unsigned(s.N));
  if (DK == 128 && prep_sm90_applies(s, q, k, v, w)) {
    launch_prep_sm90(s, q, k, v, g, beta, cu, nullptr, grid, c_begin, true, w, stream);
    return;
  }
  HYPIC_CUDA_REQUIRE(w.V == nullptr, "launch_prep_range: U formed in the walk needs gdn_prep_sm90 (plan_u_in_walk)");
  const size_t smem = PrepSmem<DK>::bytes;
  raise_smem_limit(gdn_prep_kernel<DK>, smem);
  gdn_prep_kernel<DK><<<grid, kThreads, smem, stream>>>(s, q, k, v, g, beta, cu, nullptr, w, c_begin, true);
  HYPIC_CUDA_LAUNCH_CHECK();
}

}  // namespace

void launch_prep(const GdnShape& s, const bf16* q, const bf16* k, const bf16* v, const float* g, const float* beta,
                 const int32_t* cu, int64_t max_chunks, const Workspace& w, cudaStream_t stream, const int32_t* lead) {
  if (w.dkp == 64)
    launch<64>(s, q, k, v, g, beta, cu, lead, max_chunks, w, stream);
  else
    launch<128>(s, q, k, v, g, beta, cu, lead, max_chunks, w, stream);
}

void launch_prep_range(const GdnShape& s, const bf16* q, const bf16* k, const bf16* v, const float* g,
                       const float* beta, const int32_t* cu, int64_t c_begin, int64_t c_end, const Workspace& w,
                       cudaStream_t stream) {
  HYPIC_CUDA_REQUIRE(c_end - c_begin <= 65535 && s.H <= int64_t{1} << 31, "launch_prep_range: grid too large");
  if (c_end <= c_begin) return;
  if (w.dkp == 64)
    launch_range<64>(s, q, k, v, g, beta, cu, c_begin, c_end, w, stream);
  else
    launch_range<128>(s, q, k, v, g, beta, cu, c_begin, c_end, w, stream);
}

}  // namespace hypic::cuda::gdn
