// gdn_output: the outputs of the chunked Gated DeltaNet, one block per (chunk, value head, sequence), all
// independent once gdn_state has left every chunk's start state S and true pseudo-values Vn behind:
//   O = diag(e^G) Q S + (tril(Q K^T) o e^{G_i - G_j}) Vn
// P = tril(Q K^T) o decay is computed once per chunk and kept in registers as the A operand of P Vn (the
// accumulator layout of one mma is the A layout of the next); S and Vn come in 64-column slabs.
#include "kernels/cuda/check.h"
#include "kernels/cuda/gdn_common.cuh"

namespace hypic::cuda::gdn {
namespace {

using detail::align128;
using detail::mma_bf16_16816;
using detail::pack_bf16;

template <int DK>
struct OutSmem {
  static constexpr int kLdK = DK + 8, kLdV = 64 + 8;
  static constexpr size_t q = 0;                                 // Q [64][kLdK]
  static constexpr size_t k = align128(q + 2 * kC * kLdK);       // K [64][kLdK]; later O staging [64][kLdV]
  static constexpr size_t sh = align128(k + 2 * kC * kLdK);      // S slab [DK][kLdV]
  static constexpr size_t vn = align128(sh + 2 * DK * kLdV);     // Vn slab [64][kLdV]
  static constexpr size_t g = align128(vn + 2 * kC * kLdV);      // G [64]
  static constexpr size_t bytes = align128(g + 4 * kC);
};

template <int DK>
__global__ void __launch_bounds__(kThreads) gdn_output_kernel(GdnShape s, const bf16* __restrict__ q,
                                                              const bf16* __restrict__ k,
                                                              const int32_t* __restrict__ cu, bf16* __restrict__ out,
                                                              Workspace w) {
  using SM = OutSmem<DK>;
  constexpr int kLdK = SM::kLdK, kLdV = SM::kLdV;
  extern __shared__ __align__(128) unsigned char smem[];
  bf16* Qs = reinterpret_cast<bf16*>(smem + SM::q);
  bf16* Ks = reinterpret_cast<bf16*>(smem + SM::k);
  bf16* Os = reinterpret_cast<bf16*>(smem + SM::k);
  bf16* Ss = reinterpret_cast<bf16*>(smem + SM::sh);
  bf16* Vs = reinterpret_cast<bf16*>(smem + SM::vn);
  float* Gs = reinterpret_cast<float*>(smem + SM::g);

  const int64_t n = blockIdx.z, h = blockIdx.y;
  const SeqRange sr = seq_range(cu, n, s.T);
  const int64_t t0 = sr.bos + int64_t(blockIdx.x) * kC;
  if (t0 >= sr.eos) return;
  const int L = int(sr.eos - t0 < kC ? sr.eos - t0 : kC);
  const int64_t H = s.H, kh = h / (s.H / s.Hk), tile = h * w.slots + first_slot(sr.bos, n) + blockIdx.x;
  const int dk = int(s.dk), dv = int(s.dv);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, gq = lane / 4, tq = lane % 4;

  auto load_slab = [&](int c0) {
    load_tile<DK, 64>(Ss, kLdV, w.Sh + tile * DK * w.dvp + c0, w.dvp, DK, 64);
    load_tile<kC, 64>(Vs, kLdV, w.UV + tile * kC * w.dvp + c0, w.dvp, kC, 64);
  };
  load_tile<kC, DK>(Qs, kLdK, q + (t0 * s.Hk + kh) * dk, s.Hk * dk, L, dk);
  load_tile<kC, DK>(Ks, kLdK, k + (t0 * s.Hk + kh) * dk, s.Hk * dk, L, dk);
  if (threadIdx.x < kC / 4) cp_async16(Gs + threadIdx.x * 4, w.G + tile * kC + threadIdx.x * 4, true);
  load_slab(0);
  cp_async_commit();
  cp_async_wait_all();
  __syncthreads();

  // P = tril(Q K^T) o e^{G_i - G_j}, rows 16w..16w+15, straight into A fragments for P Vn.
  const int r0 = warp * 16 + gq, r1 = r0 + 8;
  uint32_t pa[4][4];
  {
    float acc[8][4] = {};
#pragma unroll
    for (int ks = 0; ks < DK / 16; ++ks) {
      uint32_t a[4];
      frag_a(a, Qs, kLdK, warp * 16, ks * 16);
#pragma unroll
      for (int np = 0; np < 4; ++np) {
        uint32_t b0[2], b1[2];
        frag_b_nk(b0, b1, Ks, kLdK, ks * 16, np * 16);
        mma_bf16_16816(acc[2 * np], a, b0);
        mma_bf16_16816(acc[2 * np + 1], a, b1);
      }
    }
    const float g0 = Gs[r0], g1 = Gs[r1];
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
      const int j = nt * 8 + 2 * tq;
      const float gj0 = Gs[j], gj1 = Gs[j + 1];
      acc[nt][0] = j <= r0 ? acc[nt][0] * expf(g0 - gj0) : 0.0f;
      acc[nt][1] = j + 1 <= r0 ? acc[nt][1] * expf(g0 - gj1) : 0.0f;
      acc[nt][2] = j <= r1 ? acc[nt][2] * expf(g1 - gj0) : 0.0f;
      acc[nt][3] = j + 1 <= r1 ? acc[nt][3] * expf(g1 - gj1) : 0.0f;
    }
#pragma unroll
    for (int ks = 0; ks < 4; ++ks) {
      pa[ks][0] = pack_bf16(acc[2 * ks][0], acc[2 * ks][1]);
      pa[ks][1] = pack_bf16(acc[2 * ks][2], acc[2 * ks][3]);
      pa[ks][2] = pack_bf16(acc[2 * ks + 1][0], acc[2 * ks + 1][1]);
      pa[ks][3] = pack_bf16(acc[2 * ks + 1][2], acc[2 * ks + 1][3]);
    }
  }
  const float e0 = expf(Gs[r0]), e1 = expf(Gs[r1]);
  __syncthreads();  // K is consumed: its tile becomes the output staging

  const bool vec_out = dv % 8 == 0 && (H * dv) % 8 == 0 && aligned16(out);
  for (int c0 = 0; c0 < w.dvp; c0 += 64) {
    if (c0 > 0) {
      load_slab(c0);
      cp_async_commit();
      cp_async_wait_all();
      __syncthreads();
    }
    float acc[8][4] = {};
#pragma unroll
    for (int ks = 0; ks < DK / 16; ++ks) {
      uint32_t a[4];
      frag_a(a, Qs, kLdK, warp * 16, ks * 16);
#pragma unroll
      for (int np = 0; np < 4; ++np) {
        uint32_t b0[2], b1[2];
        frag_b_kn(b0, b1, Ss, kLdV, ks * 16, np * 16);
        mma_bf16_16816(acc[2 * np], a, b0);
        mma_bf16_16816(acc[2 * np + 1], a, b1);
      }
    }
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
      acc[nt][0] *= e0, acc[nt][1] *= e0, acc[nt][2] *= e1, acc[nt][3] *= e1;
    }
#pragma unroll
    for (int ks = 0; ks < 4; ++ks) {
#pragma unroll
      for (int np = 0; np < 4; ++np) {
        uint32_t b0[2], b1[2];
        frag_b_kn(b0, b1, Vs, kLdV, ks * 16, np * 16);
        mma_bf16_16816(acc[2 * np], pa[ks], b0);
        mma_bf16_16816(acc[2 * np + 1], pa[ks], b1);
      }
    }
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
      st_bf16x2(Os + r0 * kLdV + nt * 8 + 2 * tq, acc[nt][0], acc[nt][1]);
      st_bf16x2(Os + r1 * kLdV + nt * 8 + 2 * tq, acc[nt][2], acc[nt][3]);
    }
    __syncthreads();  // staging complete; S and Vn slabs no longer read
    const int ncols = min(64, dv - c0);
    bf16* dst = out + (t0 * H + h) * dv + c0;
    if (vec_out) {
      for (int i = threadIdx.x; i < L * 8; i += kThreads) {
        const int r = i / 8, c = (i % 8) * 8;
        if (c < ncols)
          *reinterpret_cast<uint4*>(dst + r * H * dv + c) = *reinterpret_cast<const uint4*>(Os + r * kLdV + c);
      }
    } else {
      for (int i = threadIdx.x; i < L * 64; i += kThreads) {
        const int r = i / 64, c = i % 64;
        if (c < ncols) dst[r * H * dv + c] = Os[r * kLdV + c];
      }
    }
  }
}

template <int DK>
void launch(const GdnShape& s, const bf16* q, const bf16* k, const int32_t* cu, int64_t max_chunks, bf16* out,
            const Workspace& w, cudaStream_t stream) {
  const size_t smem = OutSmem<DK>::bytes;
  HYPIC_CUDA_CHECK(
      cudaFuncSetAttribute(gdn_output_kernel<DK>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  gdn_output_kernel<DK><<<dim3(unsigned(max_chunks), unsigned(s.H), unsigned(s.N)), kThreads, smem, stream>>>(
      s, q, k, cu, out, w);
  HYPIC_CUDA_LAUNCH_CHECK();
}

}  // namespace

void launch_output(const GdnShape& s, const bf16* q, const bf16* k, const int32_t* cu, int64_t max_chunks,
                   bf16* out, const Workspace& w, cudaStream_t stream) {
  if (w.dkp == 64)
    launch<64>(s, q, k, cu, max_chunks, out, w, stream);
  else
    launch<128>(s, q, k, cu, max_chunks, out, w, stream);
}

}  // namespace hypic::cuda::gdn
