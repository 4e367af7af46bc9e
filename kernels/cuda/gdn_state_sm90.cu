// gdn_state on Hopper's warpgroup products (wgmma) at dk 128 (every Qwen3.5 / Qwen3-Next GDN layer), BV = 32 or
// 64 state (or transfer-operator) columns a block: the same recurrence, chunk order, workspace and outputs as
// gdn_state.cu's mma.sync form, which stays the form everywhere else. Per chunk, with W, U, G from gdn_prep:
//   Vn = U - W S                  (warpgroup g: all 64 chunk rows x state columns g BV / 2.., K = dk)
//   S  = e^{G_L} S + K^T Vd       (warpgroup g: state rows 64 g.. x all BV columns, K = the chunk's rows)
// The mma.sync walk spent its chunk issuing products and their fragment loads (at 64 columns, twice the
// 32-column walk's for the same chain of barriers); here both products read their operands straight from
// shared memory, a handful of asynchronous instructions a warpgroup.
//
// Operand layouts (SW128 rows of 128 bytes, 8-row groups 1024 bytes apart, see sm90.cuh):
//   W, K  [64 chunk rows][128 dk] as two boxes (dk halves): W is the K-major A of W S, K the MN-major A of K^T Vd
//   St    S^T in bf16, [BV columns][128 dk] as two boxes: the K-major B of W S
//   VdT   Vd^T, [BV columns][64 chunk rows]: the K-major B of the update
// both written from registers by stmatrix.trans. S stays in fp32 registers as the update's accumulator (warp w:
// rows 16 w.., the m64nBV layout).
#include "kernels/cuda/check.h"
#include "kernels/cuda/gdn_common.cuh"
#include "kernels/cuda/gdn_sm90_tiles.cuh"
#include "kernels/cuda/sm90.cuh"
#include "kernels/cuda/sm90_host.h"
#include "kernels/cuda/smem_limit.h"

namespace hypic::cuda::gdn {
namespace {

using detail::align128;

constexpr int kNT = 256;                 // two warpgroups
constexpr int kDK = 128;                 // key dim
constexpr int kBox = kSwBox;             // a W or K box: 64 rows of 128 bytes
constexpr int kPrefetch = 4;             // chunks ahead that the tiles are pulled towards L2

template <int BV>
struct Smem {
  static constexpr int kLdV = BV + 8;                             // row stride of the plain staging tiles
  static constexpr int kStBox = BV * 128;                         // a box of BV rows
  static constexpr size_t w = 0;                                  // W [2 buffers][2 boxes]
  static constexpr size_t k = w + 2 * 2 * kBox;                   // K [2 buffers][2 boxes]
  static constexpr size_t st = k + 2 * 2 * kBox;                  // S^T [2 boxes of BV rows]
  static constexpr size_t vd = st + 2 * kStBox;                   // decayed Vn, transposed [BV rows]
  static constexpr size_t vp = vd + kStBox;                       // Vn decayed to row lead - 1 (bodies), the same
  static constexpr size_t u = vp + kStBox;                        // U bf16 [2][64][kLdV]
  static constexpr size_t sp = align128(u + 2 * 2 * kC * kLdV);   // S bf16 [128][kLdV], gdn_output's start state
  static constexpr size_t vn = align128(sp + 2 * kDK * kLdV);     // Vn bf16 [64][kLdV] (output staging)
  static constexpr size_t g = align128(vn + 2 * kC * kLdV);       // G [2][64]
  // The outputs in the walk: Q [2 buffers][2 boxes], Aqk [2 buffers][1 box], Vn^T [BV rows] (B of Aqk Vn).
  static constexpr size_t q = (g + 2 * 4 * kC + 1023) / 1024 * 1024;
  static constexpr size_t a = q + 2 * 2 * kBox;
  static constexpr size_t vnt = a + 2 * kBox;
  static constexpr size_t bytes = vnt + kStBox + 1024;  // + the slack that aligns the boxes
};

// MIX (BV 64, dk = dv = 128, no bodies, no Sh / Vn for gdn_output): every block walks 32 state columns and 32
// transfer-operator columns side by side (4 blocks a head) instead of 64 of one kind (2 + 2): the blocks that
// also write the outputs then carry half as many of them, and all blocks the same load.
template <bool BODIES, int BV, bool MIX>
__global__ void __launch_bounds__(kNT, 64 / BV) gdn_state_sm90_kernel(GdnShape s, const bf16* __restrict__ k,
                                                               const int32_t* __restrict__ cu, float* state,
                                                               float* transfer, bool want_out, Workspace w,
                                                               const int32_t* __restrict__ lead, Workspace bodies,
                                                               float* __restrict__ lead_state,
                                                               const bf16* __restrict__ q, bf16* __restrict__ out) {
#if HYPIC_SM90A
  using SM = Smem<BV>;
  constexpr int kLdV = SM::kLdV, kStBox = SM::kStBox, kHalf = BV / 2;
  extern __shared__ unsigned char smem_raw[];
  unsigned char* smem = smem_raw + ((1024 - (sm90::smem_u32(smem_raw) & 1023)) & 1023);
  unsigned char* Wsm = smem + SM::w;
  unsigned char* Ksm = smem + SM::k;
  unsigned char* St = smem + SM::st;
  unsigned char* VdT = smem + SM::vd;
  unsigned char* VpT = smem + SM::vp;
  bf16* Ub = reinterpret_cast<bf16*>(smem + SM::u);
  bf16* Sp = reinterpret_cast<bf16*>(smem + SM::sp);
  bf16* Vn = reinterpret_cast<bf16*>(smem + SM::vn);
  float* Gb = reinterpret_cast<float*>(smem + SM::g);
  unsigned char* Qsm = smem + SM::q;
  unsigned char* Asm = smem + SM::a;
  unsigned char* VnT = smem + SM::vnt;

  const int64_t n = blockIdx.z, h = blockIdx.y;
  const int64_t H = s.H, kh = h / (s.H / s.Hk);
  const int dv = int(s.dv);
  static_assert(!MIX || (BV == 64 && !BODIES), "mixed blocks: 32 + 32 columns, no bodies");
  const int nsb = MIX ? dv / 32 : dv / BV;
  const bool is_T = !MIX && int(blockIdx.x) >= nsb;  // a block of transfer-operator columns
  const int c0 = (is_T ? int(blockIdx.x) - nsb : int(blockIdx.x)) * (MIX ? 32 : BV);
  const int width = is_T ? kDK : dv;  // columns of the matrix this block evolves
  // fused: this block writes its columns of the outputs (O = e^G Q S + Aqk Vn), not Sh and Vn for gdn_output.
  const bool fused = out != nullptr && !is_T;
  const bool write_out = want_out && !is_T && !fused;
  float* M = is_T ? transfer + (n * H + h) * kDK * kDK : state + (n * H + h) * kDK * dv;
  float* Mt = MIX ? transfer + (n * H + h) * kDK * kDK : nullptr;  // MIX: columns 32.. are T's c0..
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, gq = lane / 4, tq = lane % 4;
  const int wg = warp / 4, wq = warp % 4, srow = 16 * warp;
  // Element (r, c) of the block's columns in fp32 memory (c < 32 for MIX's state half: compile-time after unrolling).
  auto at = [&](float* Ms, int r, int c) -> float* {
    if (MIX && c >= 32) return Mt + int64_t(r) * kDK + c0 + c - 32;
    return Ms + int64_t(r) * width + c0 + c;
  };
  const bool t_cols = MIX ? wg == 1 : is_T;  // this warpgroup's W S columns evolve T (U = 0, no outputs)
  constexpr int kOn = MIX ? 16 : BV / 2;      // output columns a warpgroup

  // S[4 j + e] = (row srow + gq + 8 (e / 2), column 8 j + 2 tq + e % 2). A body's T starts from the identity.
  const bool body = BODIES && is_T;
  constexpr int kS = BV / 2, kP = BV / 4;  // accumulator registers: S (m64nBV), W S (m64nBV/2)
  float S[kS];
#pragma unroll
  for (int j = 0; j < BV / 8; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int r = srow + gq + (e / 2) * 8, c = 8 * j + 2 * tq + e % 2;
      S[4 * j + e] = body ? (r == c0 + c ? 1.0f : 0.0f) : *at(M, r, c);
    }
  auto store_regs = [&](float* dst, const float (&X)[kS]) {
#pragma unroll
    for (int j = 0; j < BV / 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int r = srow + gq + (e / 2) * 8, c = 8 * j + 2 * tq + e % 2;
        *at(dst, r, c) = X[4 * j + e];
      }
  };
  // S^T into St and (plain: for gdn_output) S into Sp. stmatrix matrix i of lane group i: column block jj + i / 2,
  // row half i % 2 of this warp's 16 rows.
  auto store_s = [&](bool plain) {
    const int i = lane / 8, jr = lane % 8;
#pragma unroll
    for (int jj = 0; jj < BV / 8; jj += 2) {
      const uint32_t f0 = pack_bf16(S[4 * jj], S[4 * jj + 1]), f1 = pack_bf16(S[4 * jj + 2], S[4 * jj + 3]);
      const uint32_t f2 = pack_bf16(S[4 * jj + 4], S[4 * jj + 5]), f3 = pack_bf16(S[4 * jj + 6], S[4 * jj + 7]);
      const int col = 8 * (jj + i / 2) + jr;  // stored row of St: a state column, its 8 dk rows one piece
      sm90::stmatrix_x4_trans(St + wg * kStBox + sw128(col, 2 * wq + i % 2), f0, f1, f2, f3);
      if (plain) sm90::stmatrix_x4(Sp + (srow + 8 * (i % 2) + jr) * kLdV + 8 * (jj + i / 2), f0, f1, f2, f3);
    }
  };
  store_s(write_out);

  const WalkRange wr = walk_range(s, cu, n, h, w, BODIES ? lead : nullptr, body, is_T);
  float* lead_out = wr.lead_c >= 0 ? lead_state + (n * H + h) * kDK * dv : nullptr;
  auto issue = [&](int c) {
    const int buf = c & 1;
    const int64_t t0 = wr.t0(c);
    int64_t tile;
    const Workspace& src = wr.source(c, w, bodies, h, n, tile);
    load_sw<kNT>(Wsm + buf * 2 * kBox, src.W + tile * kC * kDK, kDK, kC);
    load_sw<kNT>(Ksm + buf * 2 * kBox, k + (t0 * s.Hk + kh) * kDK, s.Hk * kDK, wr.chunk_len(c));
    if (MIX)
      load_tile_full<kNT, kC, 32>(Ub + buf * kC * kLdV, kLdV, src.UV + tile * kC * src.dvp + c0, src.dvp);
    else if (!is_T)
      load_tile_full<kNT, kC, BV>(Ub + buf * kC * kLdV, kLdV, src.UV + tile * kC * src.dvp + c0, src.dvp);
    if (fused) {
      load_sw<kNT>(Qsm + buf * 2 * kBox, q + (t0 * s.Hk + kh) * kDK, s.Hk * kDK, wr.chunk_len(c));
#pragma unroll
      for (int i = 0; i < kC * 8 / kNT; ++i) {  // Aqk: 64 rows of 128 bytes, one box
        const int e = tid + i * kNT, r = e / 8, p = e % 8;
        cp_async16(Asm + buf * kBox + sw128(r, p), w.Aqk + (wr.tile0 + c) * kC * kC + r * kC + p * 8, true);
      }
    }
    if (tid < kC / 4) cp_async16(Gb + buf * kC + tid * 4, src.G + tile * kC + tid * 4, true);
    cp_async_commit();
  };
  // L2 prefetch of chunk c + kPrefetch's tiles, W, G and K from one block of the head (key head) only.
  const bool lead_w = blockIdx.x == 0;
  const bool lead_k = blockIdx.x == 0 && h % (H / s.Hk) == 0;
  auto prefetch = [&](int c) { walk_prefetch_l2<kNT, kDK>(s, k, kh, w, wr, c, c0, lead_w, lead_k, !is_T); };
  for (int c = wr.first + 1; c < wr.first + kPrefetch && c < wr.nchunks; ++c) prefetch(c);
  if (wr.first < wr.nchunks) issue(wr.first);

  for (int c = wr.first; c < wr.nchunks; ++c) {
    const int buf = c & 1;
    unsigned char* Wc = Wsm + buf * 2 * kBox;
    unsigned char* Kc = Ksm + buf * 2 * kBox;
    const bf16* Uc = Ub + buf * kC * kLdV;
    const float* Gc = Gb + buf * kC;
    cp_async_wait_all();
    sm90::fence_proxy_async_shared();  // the copies and St's stores, before the products read them
    __syncthreads();  // chunk c landed; St holds its start state; everyone is done with the other buffer
    if (BODIES && c == wr.lead_c && wr.lead_m == 0) store_regs(lead_out, S);
    const bool partial = BODIES && c == wr.lead_c && wr.lead_m > 0;

    // W S, this warpgroup's BV / 2 columns.
    float P[kP];  // no initial values: the first product overwrites (zeroing them made ptxas serialise the products)
    sm90::wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < kDK / 16; ++ks)
      sm90::wgmma_m64k16_ss<0, 0>(P, sm90::desc_sw128(Wc + (ks / 4) * kBox + 32 * (ks % 4), 16, 1024),
                                  sm90::desc_sw128(St + (ks / 4) * kStBox + wg * kHalf * 128 + 32 * (ks % 4), 16, 1024),
                                  ks > 0);
    sm90::wgmma_commit();
    // The outputs' Q S, the same columns, a second group behind W S.
    float O[kOn / 2];
    if (fused) {
      unsigned char* Qc = Qsm + buf * 2 * kBox;
      sm90::wgmma_fence();  // O's registers were read (the last chunk's stores) since the fence above
#pragma unroll
      for (int ks = 0; ks < kDK / 16; ++ks)
        sm90::wgmma_m64k16_ss<0, 0>(O, sm90::desc_sw128(Qc + (ks / 4) * kBox + 32 * (ks % 4), 16, 1024),
                                    sm90::desc_sw128(St + (ks / 4) * kStBox + wg * kOn * 128 + 32 * (ks % 4), 16, 1024),
                                    ks > 0);
      sm90::wgmma_commit();
    }
    // While the products run: the next chunk's loads, the L2 prefetch, the start state for gdn_output.
    if (c + 1 < wr.nchunks) issue(c + 1);
    if (c + kPrefetch < wr.nchunks) prefetch(c + kPrefetch);
    if (write_out) store_tile16<kNT, kDK, BV, true>(w.Sh + (wr.tile0 + c) * kDK * w.dvp + c0, w.dvp, Sp, kLdV);
    if (fused)
      sm90::wgmma_wait<1>();  // W S (Q S may still run)
    else
      sm90::wgmma_wait<0>();
    sm90::fence_regs(P);

    const int L = wr.chunk_len(c);
    const float gL = Gc[L - 1];
    const int r0 = 16 * wq + gq, r1 = r0 + 8;
    const float d0 = r0 < L ? __expf(gL - Gc[r0]) : 0.0f, d1 = r1 < L ? __expf(gL - Gc[r1]) : 0.0f;
    float p0 = 0.0f, p1 = 0.0f;
    if (partial) {
      const float gm = Gc[wr.lead_m - 1];
      p0 = r0 < wr.lead_m ? __expf(gm - Gc[r0]) : 0.0f;
      p1 = r1 < wr.lead_m ? __expf(gm - Gc[r1]) : 0.0f;
    }
    // Vd^T (and Vp^T) by stmatrix.trans: matrix i of a lane group, column block jj + i / 2 of this warpgroup's
    // half, row half i % 2 of the warp's 16 chunk rows; stored row = a column, its 8 chunk rows one piece.
    const int mi = lane / 8, mr = lane % 8;
#pragma unroll
    for (int jj = 0; jj < kHalf / 8; jj += 2) {
      uint32_t fd[4], fp[4], fn[4];
#pragma unroll
      for (int q = 0; q < 2; ++q) {
        const int j = jj + q, col = wg * kHalf + 8 * j + 2 * tq;
        float2 u0 = make_float2(0.0f, 0.0f), u1 = u0;
        if (!t_cols) {
          u0 = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(Uc + r0 * kLdV + col));
          u1 = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(Uc + r1 * kLdV + col));
        }
        const float v00 = u0.x - P[4 * j], v01 = u0.y - P[4 * j + 1], v10 = u1.x - P[4 * j + 2],
                    v11 = u1.y - P[4 * j + 3];
        fd[2 * q] = pack_bf16(v00 * d0, v01 * d0);
        fd[2 * q + 1] = pack_bf16(v10 * d1, v11 * d1);
        fp[2 * q] = pack_bf16(v00 * p0, v01 * p0);
        fp[2 * q + 1] = pack_bf16(v10 * p1, v11 * p1);
        fn[2 * q] = pack_bf16(v00, v01);
        fn[2 * q + 1] = pack_bf16(v10, v11);
        if (write_out) {
          st_bf16x2(Vn + r0 * kLdV + col, v00, v01);
          st_bf16x2(Vn + r1 * kLdV + col, v10, v11);
        }
      }
      const uint32_t at = sw128(wg * kHalf + 8 * (jj + mi / 2) + mr, 2 * wq + mi % 2);
      sm90::stmatrix_x4_trans(VdT + at, fd[0], fd[1], fd[2], fd[3]);
      if (partial) sm90::stmatrix_x4_trans(VpT + at, fp[0], fp[1], fp[2], fp[3]);
      if (fused && !t_cols) sm90::stmatrix_x4_trans(VnT + at, fn[0], fn[1], fn[2], fn[3]);
    }
    sm90::fence_proxy_async_shared();
    __syncthreads();  // Vd complete; St no longer read

    // X = decay X + K^T V: A = this warpgroup's dk half of the K tile (MN-major, 16 chunk rows a slice),
    // B = V^T (K-major).
    auto update = [&](float (&X)[kS], float decay, const unsigned char* VT) {
#pragma unroll
      for (int i = 0; i < kS; ++i) X[i] *= decay;
      sm90::fence_regs(X);
      sm90::wgmma_fence();
#pragma unroll
      for (int ks = 0; ks < kC / 16; ++ks)
        sm90::wgmma_m64k16_ss<1, 0>(X, sm90::desc_sw128(Kc + wg * kBox + ks * 16 * 128, kBox, 1024),
                                    sm90::desc_sw128(VT + 32 * ks, 16, 1024), 1);
      sm90::wgmma_commit();
    };
    if (partial) {
      float Q[kS];
#pragma unroll
      for (int i = 0; i < kS; ++i) Q[i] = S[i];
      update(Q, __expf(Gc[wr.lead_m - 1]), VpT);
      sm90::wgmma_wait<0>();
      sm90::fence_regs(Q);
      store_regs(lead_out, Q);
    }
    update(S, __expf(gL), VdT);
    // Vn is rewritten only after the next top barrier.
    if (write_out) store_tile16<kNT, kC, BV, true>(w.UV + (wr.tile0 + c) * kC * w.dvp + c0, w.dvp, Vn, kLdV);
    if (fused) {
      // O = diag(e^G) Q S + Aqk Vn: Q S is done once the update's group is the only one left.
      sm90::wgmma_wait<1>();
      sm90::fence_regs(O);
      const float e0 = __expf(Gc[r0]), e1 = __expf(Gc[r1]);
#pragma unroll
      for (int j = 0; j < kOn / 8; ++j) O[4 * j] *= e0, O[4 * j + 1] *= e0, O[4 * j + 2] *= e1, O[4 * j + 3] *= e1;
      sm90::fence_regs(O);
      sm90::wgmma_fence();
      const unsigned char* Ac = Asm + buf * kBox;
#pragma unroll
      for (int ks = 0; ks < kC / 16; ++ks)
        sm90::wgmma_m64k16_ss<0, 0>(O, sm90::desc_sw128(Ac + 32 * ks, 16, 1024),
                                    sm90::desc_sw128(VnT + wg * kOn * 128 + 32 * ks, 16, 1024), 1);
      sm90::wgmma_commit();
      sm90::wgmma_wait<1>();  // the update
      sm90::fence_regs(S);
      store_s(false);
      sm90::wgmma_wait<0>();
      sm90::fence_regs(O);
      const int64_t t0 = wr.t0(c);
#pragma unroll
      for (int j = 0; j < kOn / 8; ++j) {
        const int col = c0 + wg * kOn + 8 * j + 2 * tq;
        if (r0 < L) st_bf16x2(out + ((t0 + r0) * H + h) * dv + col, O[4 * j], O[4 * j + 1]);
        if (r1 < L) st_bf16x2(out + ((t0 + r1) * H + h) * dv + col, O[4 * j + 2], O[4 * j + 3]);
      }
    } else {
      sm90::wgmma_wait<0>();
      sm90::fence_regs(S);
      store_s(write_out);
    }
  }

  if (BODIES && wr.lead_c >= wr.nchunks) store_regs(lead_out, S);  // the lead covers the whole sequence
  store_regs(M, S);
#endif
}

// HYPIC_CUDA_GDN_SM90: 0 = never (the mma.sync form everywhere), 64 = only the 64-column walks (those that
// build the transfer operator), anything else or unset = every walk it applies to (A/B runs).
int sm90_widths() {
  static const int mode = env_is("HYPIC_CUDA_GDN_SM90", "0") ? 0 : env_is("HYPIC_CUDA_GDN_SM90", "64") ? 64 : 32 | 64;
  return mode;
}

template <bool BODIES, int BV, bool MIX = false>
void launch(const GdnShape& s, const bf16* k, const int32_t* cu, float* state, float* transfer, bool want_out,
            const Workspace& w, cudaStream_t stream, const int32_t* lead, const Workspace& bodies, float* lead_state,
            const bf16* q, bf16* out) {
  constexpr size_t smem = Smem<BV>::bytes;
  raise_smem_limit(gdn_state_sm90_kernel<BODIES, BV, MIX>, smem);
  const int blocks = MIX ? int(s.dv / 32) : int(s.dv / BV + (transfer ? kDK / BV : 0));
  gdn_state_sm90_kernel<BODIES, BV, MIX><<<dim3(unsigned(blocks), unsigned(s.H), unsigned(s.N)), kNT, smem, stream>>>(
      s, k, cu, state, transfer, want_out, w, lead, bodies, lead_state, q, out);
  HYPIC_CUDA_LAUNCH_CHECK();
}

// HYPIC_CUDA_GDN_MIX=0: walks that build T keep separate state and T blocks (A/B runs).
bool mix_enabled() {
  static const bool on = !env_is("HYPIC_CUDA_GDN_MIX", "0");
  return on;
}

}  // namespace

bool state_sm90_applies(const GdnShape& s, const Workspace& w, const bf16* k, int bv) {
  return (bv == 32 || bv == 64) && (sm90_widths() & bv) && s.dk == kDK && w.dkp == kDK && s.dv % bv == 0 &&
         (s.Hk * kDK) % 8 == 0 && (reinterpret_cast<uintptr_t>(k) & 15) == 0 && current_device_is_sm90();
}

bool launch_state_sm90(const GdnShape& s, const bf16* k, const int32_t* cu, float* state, float* transfer,
                       bool want_out, const Workspace& w, cudaStream_t stream, const int32_t* lead,
                       const Workspace& bodies, float* lead_state, int bv, const bf16* q, bf16* out) {
  if (!state_sm90_applies(s, w, k, bv)) return false;
  HYPIC_CUDA_REQUIRE(out == nullptr || (q != nullptr && w.Aqk != nullptr && (s.H * s.dv) % 2 == 0),
                     "launch_state_sm90: outputs in the walk need q and the chunks' Aqk");
  const bool mix = bv == 64 && transfer != nullptr && lead == nullptr && s.dv == kDK && (out != nullptr || !want_out) &&
                   mix_enabled();
  if (mix) {
    launch<false, 64, true>(s, k, cu, state, transfer, want_out, w, stream, lead, bodies, lead_state, q, out);
  } else if (bv == 64) {
    if (lead) launch<true, 64>(s, k, cu, state, transfer, want_out, w, stream, lead, bodies, lead_state, q, out);
    else launch<false, 64>(s, k, cu, state, transfer, want_out, w, stream, lead, bodies, lead_state, q, out);
  } else {
    if (lead) launch<true, 32>(s, k, cu, state, transfer, want_out, w, stream, lead, bodies, lead_state, q, out);
    else launch<false, 32>(s, k, cu, state, transfer, want_out, w, stream, lead, bodies, lead_state, q, out);
  }
  return true;
}

}  // namespace hypic::cuda::gdn
