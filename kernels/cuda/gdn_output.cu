// gdn_output: the outputs of the chunked Gated DeltaNet where the state walk does not write them itself
// (output_in_walk false: the mma.sync walk), one block per (chunk, value head, sequence), all
// independent once gdn_state has left every chunk's start state S and true pseudo-values Vn behind:
//   O = diag(e^G) Q S + (tril(Q K^T) o e^{G_i - G_j}) Vn
// P = tril(Q K^T) o decay is computed once per chunk and kept in registers as the A operand of P Vn (the
// accumulator layout of one mma is the A layout of the next). Q, K, S and Vn of up to 128 value columns
// arrive in one asynchronous batch.
#include "kernels/cuda/check.h"
#include "kernels/cuda/gdn_common.cuh"
#include "kernels/cuda/smem_limit.h"

namespace hypic::cuda::gdn {
namespace {

using detail::align128;
using detail::mma_bf16_16816;
using detail::pack_bf16;

constexpr int kOutThreads = 256;  // 8 warps: warp w owns rows 16 (w % 4).., value columns 64 (w / 4)..

template <int DK>
struct OutSmem {
  static constexpr int kLdK = DK + 8, kLdV = 128 + 8;
  static constexpr size_t q = 0;                                 // Q [64][kLdK]
  static constexpr size_t k = align128(q + 2 * kC * kLdK);       // K [64][kLdK]; later O staging [64][kLdV]
  static constexpr size_t sh = align128(k + 2 * kC * kLdK);      // S [DK][kLdV] (128 value columns per pass)
  static constexpr size_t vn = align128(sh + 2 * DK * kLdV);     // Vn [64][kLdV]
  static constexpr size_t g = align128(vn + 2 * kC * kLdV);      // G [64]
  static constexpr size_t bytes = align128(g + 4 * kC);
  static_assert(kC * kLdV <= (vn - k) / 2, "O staging fits over K");
};

template <int DK>
__global__ void __launch_bounds__(kOutThreads) gdn_output_kernel(GdnShape s, const bf16* __restrict__ q,
                                                                 const bf16* __restrict__ k,
                                                                 const int32_t* __restrict__ cu,
                                                                 bf16* __restrict__ out, Workspace w) {
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
  const int rw = (warp % 4) * 16, cw = (warp / 4) * 64;  // this warp's rows and value columns in a pass

  // One pass covers 128 value columns (64 when the padded dv is 64).
  auto load_pass = [&](int64_t c0) {
    if (w.dvp - c0 >= 128) {
      load_tile_full<kOutThreads, DK, 128>(Ss, kLdV, w.Sh + tile * DK * w.dvp + c0, w.dvp);
      load_tile_full<kOutThreads, kC, 128>(Vs, kLdV, w.UV + tile * kC * w.dvp + c0, w.dvp);
    } else {
      load_tile_full<kOutThreads, DK, 64>(Ss, kLdV, w.Sh + tile * DK * w.dvp + c0, w.dvp);
      load_tile_full<kOutThreads, kC, 64>(Vs, kLdV, w.UV + tile * kC * w.dvp + c0, w.dvp);
    }
  };
  load_tile<kOutThreads, kC, DK>(Qs, kLdK, q + (t0 * s.Hk + kh) * dk, s.Hk * dk, L, dk);
  load_tile<kOutThreads, kC, DK>(Ks, kLdK, k + (t0 * s.Hk + kh) * dk, s.Hk * dk, L, dk);
  if (threadIdx.x < kC / 4) cp_async16(Gs + threadIdx.x * 4, w.G + tile * kC + threadIdx.x * 4, true);
  load_pass(0);
  cp_async_commit();
  cp_async_wait_all();
  __syncthreads();

  // P = tril(Q K^T) o e^{G_i - G_j} for this warp's rows, straight into A fragments for P Vn (the two
  // warps sharing rows both compute it: cheaper than a round trip through shared memory).
  const int r0 = rw + gq, r1 = r0 + 8;
  uint32_t pa[4][4];
  {
    float acc[8][4] = {};
#pragma unroll
    for (int ks = 0; ks < DK / 16; ++ks) {
      uint32_t a[4];
      frag_a(a, Qs, kLdK, rw, ks * 16);
#pragma unroll
      for (int np = 0; np < 4; ++np) {
        if (np * 16 > rw) break;  // causal: key tiles right of the diagonal are masked out anyway
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
      acc[nt][0] = j <= r0 ? acc[nt][0] * __expf(g0 - gj0) : 0.0f;
      acc[nt][1] = j + 1 <= r0 ? acc[nt][1] * __expf(g0 - gj1) : 0.0f;
      acc[nt][2] = j <= r1 ? acc[nt][2] * __expf(g1 - gj0) : 0.0f;
      acc[nt][3] = j + 1 <= r1 ? acc[nt][3] * __expf(g1 - gj1) : 0.0f;
    }
#pragma unroll
    for (int ks = 0; ks < 4; ++ks) {
      pa[ks][0] = pack_bf16(acc[2 * ks][0], acc[2 * ks][1]);
      pa[ks][1] = pack_bf16(acc[2 * ks][2], acc[2 * ks][3]);
      pa[ks][2] = pack_bf16(acc[2 * ks + 1][0], acc[2 * ks + 1][1]);
      pa[ks][3] = pack_bf16(acc[2 * ks + 1][2], acc[2 * ks + 1][3]);
    }
  }
  const float e0 = __expf(Gs[r0]), e1 = __expf(Gs[r1]);
  __syncthreads();  // K is consumed: its tile becomes the output staging

  const bool vec_out = dv % 8 == 0 && (H * dv) % 8 == 0 && aligned16(out);
  for (int64_t c0 = 0; c0 < w.dvp; c0 += 128) {
    const int width = int(min(int64_t{128}, w.dvp - c0));
    if (c0 > 0) {
      load_pass(c0);
      cp_async_commit();
      cp_async_wait_all();
      __syncthreads();
    }
    if (cw < width) {
      float acc[8][4] = {};
#pragma unroll
      for (int ks = 0; ks < DK / 16; ++ks) {
        uint32_t a[4];
        frag_a(a, Qs, kLdK, rw, ks * 16);
#pragma unroll
        for (int np = 0; np < 4; ++np) {
          uint32_t b0[2], b1[2];
          frag_b_kn(b0, b1, Ss, kLdV, ks * 16, cw + np * 16);
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
        if (ks * 16 > rw) break;  // P is zero right of the diagonal
#pragma unroll
        for (int np = 0; np < 4; ++np) {
          uint32_t b0[2], b1[2];
          frag_b_kn(b0, b1, Vs, kLdV, ks * 16, cw + np * 16);
          mma_bf16_16816(acc[2 * np], pa[ks], b0);
          mma_bf16_16816(acc[2 * np + 1], pa[ks], b1);
        }
      }
#pragma unroll
      for (int nt = 0; nt < 8; ++nt) {
        st_bf16x2(Os + r0 * kLdV + cw + nt * 8 + 2 * tq, acc[nt][0], acc[nt][1]);
        st_bf16x2(Os + r1 * kLdV + cw + nt * 8 + 2 * tq, acc[nt][2], acc[nt][3]);
      }
    }
    __syncthreads();  // staging complete; S and Vn no longer read
    const int ncols = int(min(int64_t{width}, dv - c0));
    bf16* dst = out + (t0 * H + h) * dv + c0;
    if (vec_out) {
      const int c = (threadIdx.x % 16) * 8;
#pragma unroll
      for (int i = 0; i < kC / (kOutThreads / 16); ++i) {
        const int rr = threadIdx.x / 16 + i * (kOutThreads / 16);
        if (rr < L && c < ncols)
          *reinterpret_cast<uint4*>(dst + rr * H * dv + c) = *reinterpret_cast<const uint4*>(Os + rr * kLdV + c);
      }
    } else {
      for (int i = threadIdx.x; i < L * 128; i += kOutThreads) {
        const int rr = i / 128, c = i % 128;
        if (c < ncols) dst[rr * H * dv + c] = Os[rr * kLdV + c];
      }
    }
    if (c0 + 128 < w.dvp) __syncthreads();  // the next pass overwrites S, Vn and the staging
  }
}

template <int DK>
void launch(const GdnShape& s, const bf16* q, const bf16* k, const int32_t* cu, int64_t max_chunks, bf16* out,
            const Workspace& w, cudaStream_t stream) {
  const size_t smem = OutSmem<DK>::bytes;
  raise_smem_limit(gdn_output_kernel<DK>, smem);
  gdn_output_kernel<DK><<<dim3(unsigned(max_chunks), unsigned(s.H), unsigned(s.N)), kOutThreads, smem, stream>>>(
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
