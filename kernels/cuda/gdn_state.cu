// gdn_state: the only sequential part of the chunked Gated DeltaNet, in its mma.sync form (the Hopper form at
// dk 128, which also writes the outputs, is gdn_state_sm90.cu; launch_cols picks). One block per (BV state columns,
// value head, sequence) walks the chunks (BV = 32, or 64 where the launch also builds T, below); columns
// of S never mix (A_t acts on the left), so the dv columns split into independent blocks. Per chunk, with W, U, G from gdn_prep:
//   Vn = U - W S                              (written over U for gdn_output, when outputs are wanted)
//   S  = e^{G_L} S + K^T diag(e^{G_L - G}) Vn
// and the chunk's start state S goes to the workspace (bf16) for gdn_output. S stays in fp32 registers
// for the whole walk (8 warps, each a 16-row tile); a bf16 copy in shared memory is the B operand of W S.
// The next chunk's W, K, U, G arrive by cp.async while this one computes (and the one after next is
// pulled into L2), so a chunk costs two barriers and two short tensor-core products per warp.
//
// The transfer operator is the same walk on a dk x dk matrix with U = 0 (T <- (e^{G_L} I - K_d^T W) T):
// ceil(dk / BV) extra blocks per head in the same launch, running alongside the state blocks.
//
// Bodies (gdn_chunked_prefill_with_bodies, `lead` given): the T blocks walk only the body, the rows from
// lead[n] on (from the identity, its first chunk's tiles from the bodies workspace), and the state blocks,
// walking the whole sequence, also write the state after the first lead[n] rows, S(lead). The body's own
// zero-start state then follows without a third walk: the walk is linear in its start state, so
// S_end = T(body) S(lead) + S(body | 0) (gdn_body_state below).
#include <algorithm>

#include "kernels/cuda/check.h"
#include "kernels/cuda/gdn_common.cuh"
#include "kernels/cuda/smem_limit.h"

namespace hypic::cuda::gdn {
namespace {

using detail::align128;
using detail::mma_bf16_16816;

// State columns per block (BV): 32 for the state alone; 64 when the launch also builds the transfer operator
// (half the blocks, one an SM: two blocks an SM contended for its issue slots and shared memory, and a block
// of twice the columns loads each chunk's W and K tiles once for both halves).
constexpr int kNT = 256;  // 8 warps
constexpr int kPrefetch = 4;  // chunks ahead that the tiles are pulled towards L2

template <int DK, bool BODIES, int BV>
struct StateSmem {
  static constexpr int kLdK = DK + 8, kLdV = BV + 8;  // row strides keep ldmatrix rows on distinct banks
  static constexpr size_t w = 0;                                    // W [2][64][kLdK]
  static constexpr size_t k = align128(w + 2 * 2 * kC * kLdK);      // K [2][64][kLdK]
  static constexpr size_t u = align128(k + 2 * 2 * kC * kLdK);      // U [2][64][kLdV]
  static constexpr size_t g = align128(u + 2 * 2 * kC * kLdV);      // G [2][64]
  static constexpr size_t sb = align128(g + 2 * 4 * kC);            // S, bf16 [DK][kLdV]
  static constexpr size_t vd = align128(sb + 2 * DK * kLdV);        // decayed Vn, bf16 [64][kLdV]
  static constexpr size_t vn = align128(vd + 2 * kC * kLdV);        // Vn, bf16 [64][kLdV] (output staging)
  static constexpr size_t vp = align128(vn + 2 * kC * kLdV);        // Vn decayed to row lead - 1 (bodies)
  static constexpr size_t bytes = align128(vp + (BODIES ? 2 * kC * kLdV : 0));
};

// Warp w: in W S, chunk rows 16 (w % 4).. and columns BV/2 (w / 4)..; in the state update, state rows
// 16 w.. (dk 128) or 16 (w % 4).. (dk 64, columns BV/2 (w / 4)..) in kBN 8-column tiles.
template <int DK, int BV>
struct StateSplit {
  static constexpr int kBN = DK == 128 ? BV / 8 : BV / 16;
  static constexpr int kWN = BV / 16;  // 8-column tiles of the warp's W S columns
  __device__ static int srow(int warp) { return DK == 128 ? warp * 16 : (warp % 4) * 16; }
  __device__ static int scol(int warp) { return DK == 128 ? 0 : (warp / 4) * (BV / 2); }
};

// BODIES: `lead` is given (a separate instance keeps the plain walk's registers and shared memory as they were).
template <int DK, bool BODIES, int BV>
__global__ void __launch_bounds__(kNT, 64 / BV) gdn_state_kernel(GdnShape s, const bf16* __restrict__ k,
                                                        const int32_t* __restrict__ cu, float* state,
                                                        float* transfer, bool want_out, Workspace w,
                                                        const int32_t* __restrict__ lead, Workspace bodies,
                                                        float* __restrict__ lead_state, bool prefetch_all) {
  using SM = StateSmem<DK, BODIES, BV>;
  using SP = StateSplit<DK, BV>;
  constexpr int kLdK = SM::kLdK, kLdV = SM::kLdV, kBN = SP::kBN, kWN = SP::kWN;
  static_assert(DK == 64 || DK == 128, "padded key dim");
  extern __shared__ __align__(128) unsigned char smem[];
  bf16* Wb = reinterpret_cast<bf16*>(smem + SM::w);
  bf16* Kb = reinterpret_cast<bf16*>(smem + SM::k);
  bf16* Ub = reinterpret_cast<bf16*>(smem + SM::u);
  float* Gb = reinterpret_cast<float*>(smem + SM::g);
  bf16* Sb = reinterpret_cast<bf16*>(smem + SM::sb);
  bf16* Vd = reinterpret_cast<bf16*>(smem + SM::vd);
  bf16* Vn = reinterpret_cast<bf16*>(smem + SM::vn);
  bf16* Vp = reinterpret_cast<bf16*>(smem + SM::vp);

  const int64_t n = blockIdx.z, h = blockIdx.y;
  const int64_t H = s.H, kh = h / (s.H / s.Hk);
  const int dk = int(s.dk), dv = int(s.dv);
  const int nsb = (dv + BV - 1) / BV;
  const bool is_T = int(blockIdx.x) >= nsb;  // a block of transfer-operator columns
  const int c0 = (is_T ? int(blockIdx.x) - nsb : int(blockIdx.x)) * BV;
  const int width = is_T ? dk : dv;  // columns of the matrix this block evolves
  const int ncols = min(BV, width - c0);
  const bool write_out = want_out && !is_T;
  float* M = is_T ? transfer + (n * H + h) * dk * dk : state + (n * H + h) * dk * dv;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, gq = lane / 4, tq = lane % 4;
  const int ra = (warp % 4) * 16, ca = (warp / 4) * (BV / 2);  // W S tile of this warp
  const int srow = SP::srow(warp), scol = SP::scol(warp);      // state tile of this warp

  // A body's T starts from the identity (no load); everything else from M.
  const bool body = BODIES && is_T;
  float S[kBN][4];
#pragma unroll
  for (int nt = 0; nt < kBN; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int r = srow + gq + (e / 2) * 8, c = scol + nt * 8 + 2 * tq + e % 2;
      S[nt][e] = (r < dk && c < ncols) ? (body ? (r == c0 + c ? 1.0f : 0.0f) : M[int64_t(r) * width + c0 + c]) : 0.0f;
    }
  // Registers -> an fp32 [dk, width] matrix (columns c0 ..).
  auto store_regs = [&](float* dst, const float (&X)[kBN][4]) {
#pragma unroll
    for (int nt = 0; nt < kBN; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int r = srow + gq + (e / 2) * 8, c = scol + nt * 8 + 2 * tq + e % 2;
        if (r < dk && c < ncols) dst[int64_t(r) * width + c0 + c] = X[nt][e];
      }
  };
  auto store_sb = [&]() {
#pragma unroll
    for (int nt = 0; nt < kBN; ++nt) {
      const int r = srow + gq, c = scol + nt * 8 + 2 * tq;
      st_bf16x2(Sb + r * kLdV + c, S[nt][0], S[nt][1]);
      st_bf16x2(Sb + (r + 8) * kLdV + c, S[nt][2], S[nt][3]);
    }
  };
  store_sb();

  const WalkRange wr = walk_range(s, cu, n, h, w, BODIES ? lead : nullptr, body, is_T);
  float* lead_out = wr.lead_c >= 0 ? lead_state + (n * H + h) * dk * dv : nullptr;
  auto issue = [&](int c) {
    const int buf = c & 1;
    const int64_t t0 = wr.t0(c);
    int64_t tile;
    const Workspace& src = wr.source(c, w, bodies, h, n, tile);
    load_tile_full<kNT, kC, DK>(Wb + buf * kC * kLdK, kLdK, src.W + tile * kC * DK, DK);
    load_tile<kNT, kC, DK>(Kb + buf * kC * kLdK, kLdK, k + (t0 * s.Hk + kh) * dk, s.Hk * dk, wr.chunk_len(c), dk);
    if (!is_T) load_tile_full<kNT, kC, BV>(Ub + buf * kC * kLdV, kLdV, src.UV + tile * kC * src.dvp + c0, src.dvp);
    if (tid < kC / 4) cp_async16(Gb + buf * kC + tid * 4, src.G + tile * kC + tid * 4, true);
    cp_async_commit();
  };
  // L2 prefetch of chunk c + kPrefetch (walk_prefetch_l2); prefetch_all: every block pulls the shared tiles
  // (the older form, for A/B runs).
  const bool lead_w = prefetch_all || blockIdx.x == 0;
  const bool lead_k = prefetch_all || (blockIdx.x == 0 && h % (H / s.Hk) == 0);
  auto prefetch = [&](int c) { walk_prefetch_l2<kNT, DK>(s, k, kh, w, wr, c, c0, lead_w, lead_k, !is_T); };
  for (int c = wr.first + 1; c < wr.first + kPrefetch && c < wr.nchunks; ++c) prefetch(c);
  if (wr.first < wr.nchunks) issue(wr.first);

  for (int c = wr.first; c < wr.nchunks; ++c) {
    const int buf = c & 1;
    const bf16* Wc = Wb + buf * kC * kLdK;
    const bf16* Kc = Kb + buf * kC * kLdK;
    const bf16* Uc = Ub + buf * kC * kLdV;
    const float* Gc = Gb + buf * kC;
    cp_async_wait_all();
    __syncthreads();  // chunk c landed; Sb holds its start state; everyone is done with the other buffer
    if (BODIES && c == wr.lead_c && wr.lead_m == 0) store_regs(lead_out, S);
    const bool partial = BODIES && c == wr.lead_c && wr.lead_m > 0;

    const int L = wr.chunk_len(c);
    const float gL = Gc[L - 1];
    const int r0 = ra + gq, r1 = r0 + 8;
    const float d0 = r0 < L ? __expf(gL - Gc[r0]) : 0.0f, d1 = r1 < L ? __expf(gL - Gc[r1]) : 0.0f;

    // W S; four accumulator sets keep the mma dependency chains short (two with 64 columns).
    constexpr int kSets = kWN == 2 ? 4 : 2;
    float va[kSets][kWN][4] = {};
#pragma unroll
    for (int ks = 0; ks < DK / 16; ++ks) {
      uint32_t a[4];
      frag_a(a, Wc, kLdK, ra, ks * 16);
#pragma unroll
      for (int np = 0; np < kWN / 2; ++np) {
        uint32_t b0[2], b1[2];
        frag_b_kn(b0, b1, Sb, kLdV, ks * 16, ca + np * 16);
        mma_bf16_16816(va[ks % kSets][2 * np], a, b0);
        mma_bf16_16816(va[ks % kSets][2 * np + 1], a, b1);
      }
    }
    // Off the critical path, while the products are in flight: the next chunk's loads, the L2 prefetch,
    // and the start state for gdn_output (Sb is not overwritten before the barrier below).
    if (c + 1 < wr.nchunks) issue(c + 1);
    if (c + kPrefetch < wr.nchunks) prefetch(c + kPrefetch);
    if (write_out) store_tile16<kNT, DK, BV, true>(w.Sh + (wr.tile0 + c) * DK * w.dvp + c0, w.dvp, Sb, kLdV);
#pragma unroll
    for (int nt = 0; nt < kWN; ++nt) {
      const int col = ca + nt * 8 + 2 * tq;
      float2 u0 = make_float2(0.0f, 0.0f), u1 = u0;
      if (!is_T) {
        u0 = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(Uc + r0 * kLdV + col));
        u1 = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(Uc + r1 * kLdV + col));
      }
      float p[4];
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        if constexpr (kSets == 4) p[e] = (va[0][nt][e] + va[1][nt][e]) + (va[2][nt][e] + va[3][nt][e]);
        else p[e] = va[0][nt][e] + va[1][nt][e];
      }
      const float v00 = u0.x - p[0], v01 = u0.y - p[1], v10 = u1.x - p[2], v11 = u1.y - p[3];
      st_bf16x2(Vd + r0 * kLdV + col, v00 * d0, v01 * d0);
      st_bf16x2(Vd + r1 * kLdV + col, v10 * d1, v11 * d1);
      if (write_out) {
        st_bf16x2(Vn + r0 * kLdV + col, v00, v01);
        st_bf16x2(Vn + r1 * kLdV + col, v10, v11);
      }
      if (partial) {  // the same chunk cut after row lead_m - 1
        const float gm = Gc[wr.lead_m - 1];
        const float p0 = r0 < wr.lead_m ? __expf(gm - Gc[r0]) : 0.0f, p1 = r1 < wr.lead_m ? __expf(gm - Gc[r1]) : 0.0f;
        st_bf16x2(Vp + r0 * kLdV + col, v00 * p0, v01 * p0);
        st_bf16x2(Vp + r1 * kLdV + col, v10 * p1, v11 * p1);
      }
    }
    __syncthreads();  // Vd complete; Sb no longer read

    // X = e^{G_end} X + K^T V.
    auto update = [&](float (&X)[kBN][4], float decay, const bf16* V) {
#pragma unroll
      for (int nt = 0; nt < kBN; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) X[nt][e] *= decay;
#pragma unroll
      for (int ks = 0; ks < kC / 16; ++ks) {
        uint32_t a[4], b[kBN][2];
#pragma unroll
        for (int np = 0; np < kBN / 2; ++np) frag_b_kn(b[2 * np], b[2 * np + 1], V, kLdV, ks * 16, scol + np * 16);
        frag_a_t(a, Kc, kLdK, srow, ks * 16);
#pragma unroll
        for (int nt = 0; nt < kBN; ++nt) mma_bf16_16816(X[nt], a, b[nt]);
      }
    };
    if (partial) {
      float P[kBN][4];
#pragma unroll
      for (int nt = 0; nt < kBN; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) P[nt][e] = S[nt][e];
      update(P, __expf(Gc[wr.lead_m - 1]), Vp);
      store_regs(lead_out, P);
    }
    update(S, __expf(gL), Vd);
    // Vn is rewritten only after the next top barrier.
    if (write_out) store_tile16<kNT, kC, BV, true>(w.UV + (wr.tile0 + c) * kC * w.dvp + c0, w.dvp, Vn, kLdV);
    store_sb();
  }

  if (BODIES && wr.lead_c >= wr.nchunks) store_regs(lead_out, S);  // the lead covers the whole sequence
  store_regs(M, S);
}

// body[n, h] = S_end[n, h] - T[n, h] S_lead[n, h]: T [dk, dk], the others [dk, dv], fp32. One block per
// (64-column tile, 64-row tile, matrix m0 + blockIdx.z = n * H + h); each thread a 4 x 4 block of the tile,
// K = dk from shared memory. With `out` the results go to sequence n's own buffers instead (body, and
// copies of T and S_end, which the block has read anyway). VEC: dk and dv multiples of 4 (16-byte access).
constexpr int kBodyTile = 64;
__host__ __device__ constexpr int body_ldt(int dk) { return dk + 4; }
template <bool VEC>
__global__ void __launch_bounds__(256) gdn_body_state_kernel(int dk, int dv, int H, int64_t m0, const float* __restrict__ T,
                                                             const float* __restrict__ S_end,
                                                             const float* __restrict__ S_lead, float* body,
                                                             BodyOutputs out) {
  extern __shared__ __align__(16) float bsm[];
  const int ldt = body_ldt(dk);
  float* Ts = bsm;                        // [64][ldt]: rows r0.. of T
  float* Ss = bsm + kBodyTile * ldt;      // [dk][64]: columns c0.. of S_lead
  const int c0 = blockIdx.x * kBodyTile, r0 = blockIdx.y * kBodyTile;
  const int64_t mat = m0 + blockIdx.z, n = mat / H, h = mat % H;
  const float* Tm = T + mat * dk * dk;
  const int64_t so = mat * int64_t(dk) * dv;
  // Where this matrix's results go: offsets so / the T matrix within `body`, or within sequence n's buffers.
  // (a null entry of an array: that sequence's result is not wanted there)
  auto own = [&](float* const* a, int64_t size) -> float* { return a[n] ? a[n] + h * size : nullptr; };
  float* body_dst = out.body ? own(out.body, int64_t(dk) * dv) : body + so;
  float* state_dst = out.state ? own(out.state, int64_t(dk) * dv) : nullptr;
  float* T_dst = out.transfer && blockIdx.x == 0 ? own(out.transfer, int64_t(dk) * dk) : nullptr;
  if constexpr (VEC) {
    const int q = dk / 4;
    for (int e = threadIdx.x; e < kBodyTile * q; e += blockDim.x) {
      const int i = e / q, j = 4 * (e % q);
      const float4 v = r0 + i < dk ? *reinterpret_cast<const float4*>(Tm + int64_t(r0 + i) * dk + j) : make_float4(0.f, 0.f, 0.f, 0.f);
      *reinterpret_cast<float4*>(Ts + i * ldt + j) = v;
    }
    for (int e = threadIdx.x; e < dk * (kBodyTile / 4); e += blockDim.x) {
      const int j = e / (kBodyTile / 4), c = 4 * (e % (kBodyTile / 4));
      const float4 v = c0 + c < dv ? *reinterpret_cast<const float4*>(S_lead + so + int64_t(j) * dv + c0 + c)
                                   : make_float4(0.f, 0.f, 0.f, 0.f);
      *reinterpret_cast<float4*>(Ss + j * kBodyTile + c) = v;
    }
  } else {
    for (int e = threadIdx.x; e < kBodyTile * dk; e += blockDim.x) {
      const int i = e / dk, j = e % dk;
      Ts[i * ldt + j] = r0 + i < dk ? Tm[int64_t(r0 + i) * dk + j] : 0.0f;
    }
    for (int e = threadIdx.x; e < dk * kBodyTile; e += blockDim.x) {
      const int j = e / kBodyTile, c = e % kBodyTile;
      Ss[e] = c0 + c < dv ? S_lead[so + int64_t(j) * dv + c0 + c] : 0.0f;
    }
  }
  __syncthreads();
  if (T_dst)  // rows r0 .. of T, from shared memory
    for (int e = threadIdx.x; e < kBodyTile * dk; e += blockDim.x) {
      const int i = e / dk, j = e % dk;
      if (r0 + i < dk) T_dst[int64_t(r0 + i) * dk + j] = Ts[i * ldt + j];
    }
  const int tr = threadIdx.x / 16, tc = threadIdx.x % 16;  // rows 4 tr.., columns 4 tc..
  float acc[4][4] = {};
  for (int j = 0; j < dk; ++j) {
    const float4 sv = *reinterpret_cast<const float4*>(Ss + j * kBodyTile + 4 * tc);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float t = Ts[(4 * tr + i) * ldt + j];
      acc[i][0] = fmaf(t, sv.x, acc[i][0]);
      acc[i][1] = fmaf(t, sv.y, acc[i][1]);
      acc[i][2] = fmaf(t, sv.z, acc[i][2]);
      acc[i][3] = fmaf(t, sv.w, acc[i][3]);
    }
  }
  const int c = c0 + 4 * tc;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int r = r0 + 4 * tr + i;
    if (r >= dk) continue;
    const int64_t at = int64_t(r) * dv + c;
    if (VEC) {
      if (c < dv) {
        const float4 e = *reinterpret_cast<const float4*>(S_end + so + at);
        if (body_dst)
          *reinterpret_cast<float4*>(body_dst + at) =
              make_float4(e.x - acc[i][0], e.y - acc[i][1], e.z - acc[i][2], e.w - acc[i][3]);
        if (state_dst) *reinterpret_cast<float4*>(state_dst + at) = e;
      }
    } else {
#pragma unroll
      for (int q = 0; q < 4; ++q)
        if (c + q < dv) {
          const float e = S_end[so + at + q];
          if (body_dst) body_dst[at + q] = e - acc[i][q];
          if (state_dst) state_dst[at + q] = e;
        }
    }
  }
}

// HYPIC_CUDA_GDN_PREFETCH=all: every block of a head pulls the head's W, K and G tiles into L2 (A/B runs).
bool prefetch_all() { return env_is("HYPIC_CUDA_GDN_PREFETCH", "all"); }

// Columns a block: HYPIC_CUDA_GDN_COLS (walks of the state alone, default 32) and HYPIC_CUDA_GDN_T_COLS
// (walks that also build the transfer operator, default 64), each 32 or 64 (A/B runs).
int block_cols(bool transfer) {
  const auto read = [](const char* name, int dflt) {
    return env_is(name, "32") ? 32 : env_is(name, "64") ? 64 : dflt;
  };
  static const int plain = read("HYPIC_CUDA_GDN_COLS", 32), with_t = read("HYPIC_CUDA_GDN_T_COLS", 64);
  return transfer ? with_t : plain;
}

template <int DK, bool BODIES, int BV>
void launch(const GdnShape& s, const bf16* k, const int32_t* cu, float* state, float* transfer, bool want_out,
            const Workspace& w, cudaStream_t stream, const int32_t* lead, const Workspace& bodies, float* lead_state) {
  const size_t smem = StateSmem<DK, BODIES, BV>::bytes;
  raise_smem_limit(gdn_state_kernel<DK, BODIES, BV>, smem);
  const int blocks = int((s.dv + BV - 1) / BV + (transfer ? (s.dk + BV - 1) / BV : 0));
  gdn_state_kernel<DK, BODIES, BV><<<dim3(unsigned(blocks), unsigned(s.H), unsigned(s.N)), kNT, smem, stream>>>(
      s, k, cu, state, transfer, want_out, w, lead, bodies, lead_state, prefetch_all());
  HYPIC_CUDA_LAUNCH_CHECK();
}

template <int DK, bool BODIES>
void launch_cols(const GdnShape& s, const bf16* k, const int32_t* cu, float* state, float* transfer, bool want_out,
                 const Workspace& w, cudaStream_t stream, const int32_t* lead, const Workspace& bodies,
                 float* lead_state, const bf16* q, bf16* out) {
  if (DK == 128 && !BODIES && launch_walk_rs(s, k, cu, state, transfer, want_out, w, stream, q, out)) return;
  HYPIC_CUDA_REQUIRE(w.V == nullptr, "launch_state: U formed in the walk needs the register-state walk (plan_u_in_walk)");
  const int bv = block_cols(transfer != nullptr);
  if (DK == 128 &&
      launch_state_sm90(s, k, cu, state, transfer, want_out, w, stream, lead, bodies, lead_state, bv, q, out))
    return;
  HYPIC_CUDA_REQUIRE(out == nullptr, "launch_state: outputs in the walk need the Hopper walk (plan_output_in_walk)");
  if (bv == 64)
    launch<DK, BODIES, 64>(s, k, cu, state, transfer, want_out, w, stream, lead, bodies, lead_state);
  else
    launch<DK, BODIES, 32>(s, k, cu, state, transfer, want_out, w, stream, lead, bodies, lead_state);
}

}  // namespace

bool plan_output_in_walk(const GdnShape& s, Workspace& w, const bf16* q, const bf16* k, bool transfer, const bf16* out) {
  static const bool on = !env_is("HYPIC_CUDA_GDN_FUSED_OUT", "0");
  const bool fused = on && out != nullptr && q != nullptr && (reinterpret_cast<uintptr_t>(q) & 15) == 0 &&
                     w.Sh != nullptr && state_sm90_applies(s, w, k, block_cols(transfer));
  if (fused) w.Aqk = w.Sh;  // the chunk start states are never written then
  return fused;
}

void launch_state(const GdnShape& s, const bf16* k, const int32_t* cu, float* state, float* transfer, bool want_out,
                  const Workspace& w, cudaStream_t stream, const int32_t* lead, const Workspace* bodies,
                  float* lead_state, const bf16* q, bf16* out) {
  HYPIC_CUDA_REQUIRE(lead == nullptr || (bodies != nullptr && lead_state != nullptr && transfer != nullptr),
                     "launch_state: a body walk needs the bodies workspace, S(lead) and the transfer operators");
  const Workspace none{};
  const Workspace& b = bodies ? *bodies : none;
  if (w.dkp == 64) {
    if (lead) launch_cols<64, true>(s, k, cu, state, transfer, want_out, w, stream, lead, b, lead_state, q, out);
    else launch_cols<64, false>(s, k, cu, state, transfer, want_out, w, stream, lead, b, lead_state, q, out);
  } else {
    if (lead) launch_cols<128, true>(s, k, cu, state, transfer, want_out, w, stream, lead, b, lead_state, q, out);
    else launch_cols<128, false>(s, k, cu, state, transfer, want_out, w, stream, lead, b, lead_state, q, out);
  }
}

void launch_body_state(const GdnShape& s, const float* transfer, const float* state, const float* lead_state,
                       float* body_state, const BodyOutputs& out, cudaStream_t stream) {
  const int dk = int(s.dk), dv = int(s.dv);
  const bool vec = dk % 4 == 0 && dv % 4 == 0;
  const size_t smem = sizeof(float) * size_t(kBodyTile * body_ldt(dk) + dk * kBodyTile);
  // dk 128: 66 KB; the largest dk's size, so one raise a device serves every shape.
  const size_t most = sizeof(float) * size_t(kBodyTile * body_ldt(128) + 128 * kBodyTile);
  raise_smem_limit(gdn_body_state_kernel<true>, most);
  raise_smem_limit(gdn_body_state_kernel<false>, most);
  // At most 65535 matrices per launch (the grid's z limit).
  for (int64_t m0 = 0; m0 < s.N * s.H; m0 += 65535) {
    const int64_t m = std::min<int64_t>(65535, s.N * s.H - m0);
    const dim3 grid(unsigned((dv + kBodyTile - 1) / kBodyTile), unsigned((dk + kBodyTile - 1) / kBodyTile), unsigned(m));
    if (vec)
      gdn_body_state_kernel<true><<<grid, 256, smem, stream>>>(dk, dv, int(s.H), m0, transfer, state, lead_state,
                                                               body_state, out);
    else
      gdn_body_state_kernel<false><<<grid, 256, smem, stream>>>(dk, dv, int(s.H), m0, transfer, state, lead_state,
                                                                body_state, out);
    HYPIC_CUDA_LAUNCH_CHECK();
  }
}

}  // namespace hypic::cuda::gdn
