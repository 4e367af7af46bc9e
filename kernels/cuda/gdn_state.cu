// gdn_state: the only sequential part of the chunked Gated DeltaNet. One block per (32 state columns,
// value head, sequence) walks the chunks; columns of S never mix (A_t acts on the left), so the dv columns
// split into independent blocks. Per chunk, with W, U, G from gdn_prep:
//   Vn = U - W S                              (written over U for gdn_output, when outputs are wanted)
//   S  = e^{G_L} S + K^T diag(e^{G_L - G}) Vn
// and the chunk's start state S goes to the workspace (bf16) for gdn_output. S stays in fp32 registers
// for the whole walk (8 warps, each a 16-row tile); a bf16 copy in shared memory is the B operand of W S.
// The next chunk's W, K, U, G arrive by cp.async while this one computes (and the one after next is
// pulled into L2), so a chunk costs two barriers and two short tensor-core products per warp.
//
// The transfer operator is the same walk on a dk x dk matrix with U = 0 (T <- (e^{G_L} I - K_d^T W) T):
// ceil(dk / 32) extra blocks per head in the same launch, running alongside the state blocks.
#include "kernels/cuda/check.h"
#include "kernels/cuda/gdn_common.cuh"

namespace hypic::cuda::gdn {
namespace {

using detail::align128;
using detail::mma_bf16_16816;

constexpr int kBV = 32;       // state columns per block
constexpr int kNT = 256;      // 8 warps
constexpr int kPrefetch = 4;  // chunks ahead that the tiles are pulled towards L2

template <int DK>
struct StateSmem {
  static constexpr int kLdK = DK + 8, kLdV = kBV + 8;  // row strides keep ldmatrix rows on distinct banks
  static constexpr size_t w = 0;                                    // W [2][64][kLdK]
  static constexpr size_t k = align128(w + 2 * 2 * kC * kLdK);      // K [2][64][kLdK]
  static constexpr size_t u = align128(k + 2 * 2 * kC * kLdK);      // U [2][64][kLdV]
  static constexpr size_t g = align128(u + 2 * 2 * kC * kLdV);      // G [2][64]
  static constexpr size_t sb = align128(g + 2 * 4 * kC);            // S, bf16 [DK][kLdV]
  static constexpr size_t vd = align128(sb + 2 * DK * kLdV);        // decayed Vn, bf16 [64][kLdV]
  static constexpr size_t vn = align128(vd + 2 * kC * kLdV);        // Vn, bf16 [64][kLdV] (output staging)
  static constexpr size_t bytes = align128(vn + 2 * kC * kLdV);
};

// Warp w: in W S, chunk rows 16 (w % 4).. and columns 16 (w / 4)..; in the state update, state rows
// kRows w.. (16-row tiles) and kBN 8-column tiles.
template <int DK>
struct StateSplit {
  static constexpr int kBN = DK == 128 ? 4 : 2;
  __device__ static int srow(int warp) { return DK == 128 ? warp * 16 : (warp % 4) * 16; }
  __device__ static int scol(int warp) { return DK == 128 ? 0 : (warp / 4) * 16; }
};

template <int DK>
__global__ void __launch_bounds__(kNT, 2) gdn_state_kernel(GdnShape s, const bf16* __restrict__ k,
                                                        const int32_t* __restrict__ cu, float* state,
                                                        float* transfer, bool want_out, Workspace w,
                                                        const int32_t* __restrict__ lead, Workspace bodies) {
  using SM = StateSmem<DK>;
  using SP = StateSplit<DK>;
  constexpr int kLdK = SM::kLdK, kLdV = SM::kLdV, kBN = SP::kBN;
  static_assert(DK == 64 || DK == 128, "padded key dim");
  extern __shared__ __align__(128) unsigned char smem[];
  bf16* Wb = reinterpret_cast<bf16*>(smem + SM::w);
  bf16* Kb = reinterpret_cast<bf16*>(smem + SM::k);
  bf16* Ub = reinterpret_cast<bf16*>(smem + SM::u);
  float* Gb = reinterpret_cast<float*>(smem + SM::g);
  bf16* Sb = reinterpret_cast<bf16*>(smem + SM::sb);
  bf16* Vd = reinterpret_cast<bf16*>(smem + SM::vd);
  bf16* Vn = reinterpret_cast<bf16*>(smem + SM::vn);

  const int64_t n = blockIdx.z, h = blockIdx.y;
  const int64_t H = s.H, kh = h / (s.H / s.Hk);
  const int dk = int(s.dk), dv = int(s.dv);
  const int nsb = (dv + kBV - 1) / kBV;
  const bool is_T = int(blockIdx.x) >= nsb;  // a block of transfer-operator columns
  const int c0 = (is_T ? int(blockIdx.x) - nsb : int(blockIdx.x)) * kBV;
  const int width = is_T ? dk : dv;  // columns of the matrix this block evolves
  const int ncols = min(kBV, width - c0);
  const bool write_out = want_out && !is_T;
  float* M = is_T ? transfer + (n * H + h) * dk * dk : state + (n * H + h) * dk * dv;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, gq = lane / 4, tq = lane % 4;
  const int ra = (warp % 4) * 16, ca = (warp / 4) * 16;        // W S tile of this warp
  const int srow = SP::srow(warp), scol = SP::scol(warp);      // state tile of this warp

  float S[kBN][4];
#pragma unroll
  for (int nt = 0; nt < kBN; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int r = srow + gq + (e / 2) * 8, c = scol + nt * 8 + 2 * tq + e % 2;
      S[nt][e] = (r < dk && c < ncols) ? M[int64_t(r) * width + c0 + c] : 0.0f;
    }
  auto store_sb = [&]() {
#pragma unroll
    for (int nt = 0; nt < kBN; ++nt) {
      const int r = srow + gq, c = scol + nt * 8 + 2 * tq;
      st_bf16x2(Sb + r * kLdV + c, S[nt][0], S[nt][1]);
      st_bf16x2(Sb + (r + 8) * kLdV + c, S[nt][2], S[nt][3]);
    }
  };
  store_sb();

  const SeqRange sr = seq_range(cu, n, s.T);
  const int nchunks = int((sr.eos - sr.bos + kC - 1) / kC);
  const int64_t tile0 = h * w.slots + first_slot(sr.bos, n);
  // A body walk starts at the chunk holding row lead[n], whose tiles (its leading rows made no-ops) come
  // from the bodies workspace; the later chunks are the forward's own.
  const int first = lead ? min(int(lead[n] / kC), nchunks) : 0;
  auto chunk_len = [&](int c) {
    const int64_t left = sr.eos - sr.bos - int64_t(c) * kC;
    return int(left < kC ? left : kC);
  };
  auto issue = [&](int c) {
    const int buf = c & 1;
    const int64_t t0 = sr.bos + int64_t(c) * kC;
    const bool own = lead != nullptr && c == first;
    const Workspace& src = own ? bodies : w;
    const int64_t tile = own ? h * bodies.slots + n : tile0 + c;
    load_tile_full<kNT, kC, DK>(Wb + buf * kC * kLdK, kLdK, src.W + tile * kC * DK, DK);
    load_tile<kNT, kC, DK>(Kb + buf * kC * kLdK, kLdK, k + (t0 * s.Hk + kh) * dk, s.Hk * dk, chunk_len(c), dk);
    if (!is_T) load_tile_full<kNT, kC, kBV>(Ub + buf * kC * kLdV, kLdV, src.UV + tile * kC * src.dvp + c0, src.dvp);
    if (tid < kC / 4) cp_async16(Gb + buf * kC + tid * 4, src.G + tile * kC + tid * 4, true);
    cp_async_commit();
  };
  // The walk is latency-bound: pulling the tiles of chunk c + kPrefetch into L2 keeps the cp.async of
  // chunk c + 1 an L2 hit. One 128-byte line per thread and tile.
  auto prefetch = [&](int c) {
    const int64_t t0 = sr.bos + int64_t(c) * kC;
    if (tid < kC * DK * 2 / 128) prefetch_l2(reinterpret_cast<const char*>(w.W + (tile0 + c) * kC * DK) + tid * 128);
    if (tid < 2 * kC) {
      const int r = tid / 2, half = tid % 2;
      if (r < chunk_len(c) && half * 64 < dk) prefetch_l2(k + ((t0 + r) * s.Hk + kh) * dk + half * 64);
    } else if (tid < 3 * kC) {
      if (!is_T) prefetch_l2(w.UV + ((tile0 + c) * kC + tid - 2 * kC) * w.dvp + c0);
    } else if (tid < 3 * kC + 2) {
      prefetch_l2(w.G + (tile0 + c) * kC + (tid - 3 * kC) * 32);
    }
  };
  for (int c = first + 1; c < first + kPrefetch && c < nchunks; ++c) prefetch(c);
  if (first < nchunks) issue(first);

  for (int c = first; c < nchunks; ++c) {
    const int buf = c & 1;
    const bf16* Wc = Wb + buf * kC * kLdK;
    const bf16* Kc = Kb + buf * kC * kLdK;
    const bf16* Uc = Ub + buf * kC * kLdV;
    const float* Gc = Gb + buf * kC;
    cp_async_wait_all();
    __syncthreads();  // chunk c landed; Sb holds its start state; everyone is done with the other buffer

    const int L = chunk_len(c);
    const float gL = Gc[L - 1];
    const int r0 = ra + gq, r1 = r0 + 8;
    const float d0 = r0 < L ? __expf(gL - Gc[r0]) : 0.0f, d1 = r1 < L ? __expf(gL - Gc[r1]) : 0.0f;

    // W S; four accumulator sets keep the mma dependency chains short.
    float va[4][2][4] = {};
#pragma unroll
    for (int ks = 0; ks < DK / 16; ++ks) {
      uint32_t a[4], b0[2], b1[2];
      frag_a(a, Wc, kLdK, ra, ks * 16);
      frag_b_kn(b0, b1, Sb, kLdV, ks * 16, ca);
      mma_bf16_16816(va[ks % 4][0], a, b0);
      mma_bf16_16816(va[ks % 4][1], a, b1);
    }
    // Off the critical path, while the products are in flight: the next chunk's loads, the L2 prefetch,
    // and the start state for gdn_output (Sb is not overwritten before the barrier below).
    if (c + 1 < nchunks) issue(c + 1);
    if (c + kPrefetch < nchunks) prefetch(c + kPrefetch);
    if (write_out) store_tile16<kNT, DK, kBV, true>(w.Sh + (tile0 + c) * DK * w.dvp + c0, w.dvp, Sb, kLdV);
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) {
      const int col = ca + nt * 8 + 2 * tq;
      float2 u0 = make_float2(0.0f, 0.0f), u1 = u0;
      if (!is_T) {
        u0 = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(Uc + r0 * kLdV + col));
        u1 = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(Uc + r1 * kLdV + col));
      }
      float p[4];
#pragma unroll
      for (int e = 0; e < 4; ++e) p[e] = (va[0][nt][e] + va[1][nt][e]) + (va[2][nt][e] + va[3][nt][e]);
      const float v00 = u0.x - p[0], v01 = u0.y - p[1], v10 = u1.x - p[2], v11 = u1.y - p[3];
      st_bf16x2(Vd + r0 * kLdV + col, v00 * d0, v01 * d0);
      st_bf16x2(Vd + r1 * kLdV + col, v10 * d1, v11 * d1);
      if (write_out) {
        st_bf16x2(Vn + r0 * kLdV + col, v00, v01);
        st_bf16x2(Vn + r1 * kLdV + col, v10, v11);
      }
    }
    __syncthreads();  // Vd complete; Sb no longer read

    // S = e^{G_L} S + K^T Vd.
    const float eL = __expf(gL);
#pragma unroll
    for (int nt = 0; nt < kBN; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) S[nt][e] *= eL;
#pragma unroll
    for (int ks = 0; ks < kC / 16; ++ks) {
      uint32_t a[4], b[kBN][2];
#pragma unroll
      for (int np = 0; np < kBN / 2; ++np) frag_b_kn(b[2 * np], b[2 * np + 1], Vd, kLdV, ks * 16, scol + np * 16);
      frag_a_t(a, Kc, kLdK, srow, ks * 16);
#pragma unroll
      for (int nt = 0; nt < kBN; ++nt) mma_bf16_16816(S[nt], a, b[nt]);
    }
    // Vn is rewritten only after the next top barrier.
    if (write_out) store_tile16<kNT, kC, kBV, true>(w.UV + (tile0 + c) * kC * w.dvp + c0, w.dvp, Vn, kLdV);
    store_sb();
  }

#pragma unroll
  for (int nt = 0; nt < kBN; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int r = srow + gq + (e / 2) * 8, c = scol + nt * 8 + 2 * tq + e % 2;
      if (r < dk && c < ncols) M[int64_t(r) * width + c0 + c] = S[nt][e];
    }
}

template <int DK>
void launch(const GdnShape& s, const bf16* k, const int32_t* cu, float* state, float* transfer, bool want_out,
            const Workspace& w, cudaStream_t stream, const int32_t* lead, const Workspace& bodies) {
  const size_t smem = StateSmem<DK>::bytes;
  HYPIC_CUDA_CHECK(cudaFuncSetAttribute(gdn_state_kernel<DK>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  const int blocks = int((s.dv + kBV - 1) / kBV + (transfer ? (s.dk + kBV - 1) / kBV : 0));
  gdn_state_kernel<DK><<<dim3(unsigned(blocks), unsigned(s.H), unsigned(s.N)), kNT, smem, stream>>>(
      s, k, cu, state, transfer, want_out, w, lead, bodies);
  HYPIC_CUDA_LAUNCH_CHECK();
}

}  // namespace

void launch_state(const GdnShape& s, const bf16* k, const int32_t* cu, float* state, float* transfer, bool want_out,
                  const Workspace& w, cudaStream_t stream, const int32_t* lead, const Workspace* bodies) {
  HYPIC_CUDA_REQUIRE(lead == nullptr || (bodies != nullptr && !want_out), "launch_state: a body walk has no outputs");
  const Workspace none{};
  if (w.dkp == 64)
    launch<64>(s, k, cu, state, transfer, want_out, w, stream, lead, bodies ? *bodies : none);
  else
    launch<128>(s, k, cu, state, transfer, want_out, w, stream, lead, bodies ? *bodies : none);
}

}  // namespace hypic::cuda::gdn
