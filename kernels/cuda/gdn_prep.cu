// gdn_prep: the chunk-local half of the chunked Gated DeltaNet, one block per (chunk, value head,
// sequence), no dependence between chunks. For a chunk of 64 tokens with in-chunk cumulative log decay G:
//   L = strict-lower(beta_i e^{G_i - G_j} k_i . k_j)      (K K^T on tensor cores)
//   A = (I + L)^-1                                        (blockwise, below)
//   W = A diag(beta e^G) K,   U = A diag(beta) V          (tensor cores, bf16 to the workspace)
// so that the chunk's true pseudo-values are Vn = U - W S0 (the CPU's forward substitution in matrix form).
//
// The inverse, in place over L. The four 16 x 16 diagonal blocks of I + L are unit lower triangular: one
// warp each inverts its block by forward substitution in fp32 (lane c owns column c). The off-diagonal
// blocks follow from (I + L) A = I as the inverse of a block-triangular matrix, 16 x 16 products scheduled
// over the 4 warps in 4 steps (below). Those products stay fp32 accurate to ~16 bits by splitting every
// operand into bf16 hi + lo and summing the three significant cross products on tensor cores: A is only
// rounded to bf16 once, with its column scaling, as the operand of W and U.
#include "kernels/cuda/check.h"
#include "kernels/cuda/gdn_common.cuh"
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
  static constexpr int kLdF = kC + 8;   // fp32 64-wide tile; 72 = 8 mod 32 keeps float2 fragment loads clean
  static constexpr size_t k = 0;                              // K [64][kLdK]; later the W staging tile
  static constexpr size_t v = align128(k + 2 * kC * kLdK);    // V [64][kLdV]; later the U staging tile
  static constexpr size_t a = align128(v + 2 * kC * kLdV);    // L, turned into A in place (fp32 [64][kLdF])
  static constexpr size_t gs = align128(a + 4 * kC * kLdF);   // G
  static constexpr size_t bs = gs + 4 * kC;                   // beta
  static constexpr size_t ws = bs + 4 * kC;                   // beta e^G
  static constexpr size_t bytes = align128(ws + 4 * kC);      // ~53 KB: 4 blocks per SM
};

__device__ __forceinline__ void split_bf16(float x0, float x1, uint32_t& hi, uint32_t& lo) {
  const __nv_bfloat162 h = __floats2bfloat162_rn(x0, x1);
  const float2 f = __bfloat1622float2(h);
  hi = *reinterpret_cast<const uint32_t*>(&h);
  lo = detail::pack_bf16(x0 - f.x, x1 - f.y);
}

// c += A B for 16 x 16 fp32 tiles in shared memory (one warp), hi/lo split as described above.
__device__ __forceinline__ void mm16(float c[2][4], const float* A, int lda, const float* B, int ldb) {
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  uint32_t ah[4], al[4];
  const float2 x0 = *reinterpret_cast<const float2*>(A + g * lda + 2 * t);
  const float2 x1 = *reinterpret_cast<const float2*>(A + (g + 8) * lda + 2 * t);
  const float2 x2 = *reinterpret_cast<const float2*>(A + g * lda + 2 * t + 8);
  const float2 x3 = *reinterpret_cast<const float2*>(A + (g + 8) * lda + 2 * t + 8);
  split_bf16(x0.x, x0.y, ah[0], al[0]);
  split_bf16(x1.x, x1.y, ah[1], al[1]);
  split_bf16(x2.x, x2.y, ah[2], al[2]);
  split_bf16(x3.x, x3.y, ah[3], al[3]);
#pragma unroll
  for (int nt = 0; nt < 2; ++nt) {
    const int n = nt * 8 + g;
    uint32_t bh[2], bl[2];
    split_bf16(B[(2 * t) * ldb + n], B[(2 * t + 1) * ldb + n], bh[0], bl[0]);
    split_bf16(B[(2 * t + 8) * ldb + n], B[(2 * t + 9) * ldb + n], bh[1], bl[1]);
    mma_bf16_16816(c[nt], ah, bh);
    mma_bf16_16816(c[nt], ah, bl);
    mma_bf16_16816(c[nt], al, bh);
  }
}

__device__ __forceinline__ void zero16(float c[2][4]) {
#pragma unroll
  for (int nt = 0; nt < 2; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) c[nt][e] = 0.0f;
}

__device__ __forceinline__ void ld16(float c[2][4], const float* D, int ld) {
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
#pragma unroll
  for (int nt = 0; nt < 2; ++nt) {
    const float2 lo = *reinterpret_cast<const float2*>(D + g * ld + nt * 8 + 2 * t);
    const float2 hi = *reinterpret_cast<const float2*>(D + (g + 8) * ld + nt * 8 + 2 * t);
    c[nt][0] = lo.x, c[nt][1] = lo.y, c[nt][2] = hi.x, c[nt][3] = hi.y;
  }
}

__device__ __forceinline__ void st16(float* D, int ld, const float c[2][4], float scale) {
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
#pragma unroll
  for (int nt = 0; nt < 2; ++nt) {
    *reinterpret_cast<float2*>(D + g * ld + nt * 8 + 2 * t) = make_float2(scale * c[nt][0], scale * c[nt][1]);
    *reinterpret_cast<float2*>(D + (g + 8) * ld + nt * 8 + 2 * t) = make_float2(scale * c[nt][2], scale * c[nt][3]);
  }
}

template <int DK>
__global__ void __launch_bounds__(kThreads, 4) gdn_prep_kernel(GdnShape s, const bf16* __restrict__ q,
                                                            const bf16* __restrict__ k,
                                                            const bf16* __restrict__ v, const float* __restrict__ g,
                                                            const float* __restrict__ beta,
                                                            const int32_t* __restrict__ cu,
                                                            const int32_t* __restrict__ lead, Workspace w,
                                                            int64_t chunk_base, bool heads_fast) {
  using SM = PrepSmem<DK>;
  constexpr int kLdK = SM::kLdK, kLdV = SM::kLdV, kLdF = SM::kLdF;
  extern __shared__ __align__(128) unsigned char smem[];
  bf16* Ks = reinterpret_cast<bf16*>(smem + SM::k);
  bf16* Vs = reinterpret_cast<bf16*>(smem + SM::v);
  float* Af = reinterpret_cast<float*>(smem + SM::a);
  float* Gs = reinterpret_cast<float*>(smem + SM::gs);
  float* Bs = reinterpret_cast<float*>(smem + SM::bs);
  float* BWs = reinterpret_cast<float*>(smem + SM::ws);

  // heads_fast: grid (heads, chunks), so that blocks start chunk by chunk (launch_prep_range).
  const int64_t n = blockIdx.z, h = heads_fast ? blockIdx.x : blockIdx.y;
  const SeqRange sr = seq_range(cu, n, s.T);
  // With `lead`, one block per sequence prepares only the chunk holding row lead[n], its rows before it
  // made no-ops (g = 0, beta = 0), into the compact tile h * w.slots + n of a bodies workspace.
  const int64_t chunk = lead ? lead[n] / kC : chunk_base + int64_t(heads_fast ? blockIdx.y : blockIdx.x);
  const int skip = lead ? int(lead[n] - chunk * kC) : 0;
  const int64_t t0 = sr.bos + chunk * kC;
  if (t0 >= sr.eos) return;
  const int L = int(sr.eos - t0 < kC ? sr.eos - t0 : kC);
  const int64_t H = s.H, kh = h / (s.H / s.Hk);
  const int64_t tile = lead ? h * w.slots + n : h * w.slots + first_slot(sr.bos, n) + chunk;
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
  if (warp == 0) {
    // Inclusive scan of g over the chunk (two tokens per lane); padded tokens add 0, so their G repeats
    // the last real one, and their beta is 0.
    const int i0 = lane * 2, i1 = lane * 2 + 1;
    const bool live0 = i0 < L && i0 >= skip, live1 = i1 < L && i1 >= skip;
    const float a = live0 ? g[(t0 + i0) * H + h] : 0.0f;
    const float b = a + (live1 ? g[(t0 + i1) * H + h] : 0.0f);
    float incl = b;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const float y = __shfl_up_sync(0xffffffffu, incl, o);
      if (lane >= o) incl += y;
    }
    Gs[i0] = incl - b + a;
    Gs[i1] = incl;
    w.G[tile * kC + i0] = incl - b + a;
    w.G[tile * kC + i1] = incl;
    const float b0 = live0 ? beta[(t0 + i0) * H + h] : 0.0f, b1 = live1 ? beta[(t0 + i1) * H + h] : 0.0f;
    Bs[i0] = b0;
    Bs[i1] = b1;
    BWs[i0] = b0 * __expf(incl - b + a);
    BWs[i1] = b1 * __expf(incl);
  }
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
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int i = warp * 16 + gq + half * 8;
      const float bi = Bs[i], gi = Gs[i];
#pragma unroll
      for (int nt = 0; nt < 8; ++nt) {
        const int j = nt * 8 + 2 * tq;
        const float l0 = (j < i && i < L) ? bi * __expf(gi - Gs[j]) * acc[nt][2 * half] : 0.0f;
        const float l1 = (j + 1 < i && i < L) ? bi * __expf(gi - Gs[j + 1]) * acc[nt][2 * half + 1] : 0.0f;
        *reinterpret_cast<float2*>(Af + i * kLdF + j) = make_float2(l0, l1);
      }
    }
  }
  __syncthreads();

  // Aqk = tril(Q K^T) o e^{G_i - G_j} (diagonal included), for the walk that writes the outputs (gdn_output's
  // P): warp w's rows, Q (in V's tile) and K from shared memory as for L.
  if (want_aqk) {
    const int ra = warp * 16 + gq, rb = ra + 8;
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
    bf16* dst = w.Aqk + tile * kC * kC;
    const float ga = Gs[ra], gb = Gs[rb];
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
      const int j = nt * 8 + 2 * tq;
      const float gj0 = Gs[j], gj1 = Gs[j + 1];
      st_bf16x2(dst + ra * kC + j, j <= ra ? acc[nt][0] * __expf(ga - gj0) : 0.0f,
                j + 1 <= ra ? acc[nt][1] * __expf(ga - gj1) : 0.0f);
      st_bf16x2(dst + rb * kC + j, j <= rb ? acc[nt][2] * __expf(gb - gj0) : 0.0f,
                j + 1 <= rb ? acc[nt][3] * __expf(gb - gj1) : 0.0f);
    }
  }

  // Diagonal blocks, in place: X_b = (I + L_bb)^-1, warp b, lane c < 16 runs column c. Row i of L is read
  // into registers by the whole half-warp before any lane overwrites it with row i of X.
  if (lane < 16) {
    const int c = lane;
    float* B = Af + warp * 16 * kLdF + warp * 16;
    float x[16];
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      float l[16];
#pragma unroll
      for (int j = 0; j < i; ++j) l[j] = B[i * kLdF + j];
      __syncwarp(0x0000ffffu);
      float acc = i == c ? 1.0f : 0.0f;
#pragma unroll
      for (int j = 0; j < i; ++j) acc -= l[j] * x[j];
      x[i] = acc;
      B[i * kLdF + c] = acc;
    }
  }
  __syncthreads();

  if (want_aqk) {  // every warp is done with Q (the barrier above): V takes its tile
    load_tile<kThreads, kC, 128>(Vs, kLdV, vsrc, H * dv, L, min(128, dv));
    cp_async_commit();
  }

  // Off-diagonal blocks, as the inverse of a 2 x 2 block-triangular matrix twice over: first the two 32 x 32
  // diagonal inverses Y0 = [X0 0; A10 X1], Y1 = [X2 0; A32 X3], then the lower-left 32 x 32 block
  // -Y1 L' Y0 (L' = [L20 L21; L30 L31]) as P = L' Y0 and -Y1 P. Temporaries live in A's (unused) upper
  // blocks. Four barrier steps; at most two 16 x 16 products per warp and step.
  {
    // L's off-diagonal blocks sit where A's will go; each is read for the last time before it is replaced.
    auto Lb = [&](int i, int j) { return Af + i * 16 * kLdF + j * 16; };
    auto Ablk = [&](int i, int j) { return Af + i * 16 * kLdF + j * 16; };
    float* T10 = Ablk(0, 1);  // L10 X0
    float* T32 = Ablk(2, 3);  // L32 X2
    float* P00 = Ablk(0, 2);  // L20 X0, then + L21 A10
    float* P10 = Ablk(0, 3);  // L30 X0, then + L31 A10
    float* P01 = Ablk(1, 2);  // L21 X1
    float* P11 = Ablk(1, 3);  // L31 X1
    float c[2][4];
    zero16(c);
    if (warp == 0) {
      mm16(c, Lb(1, 0), kLdF, Ablk(0, 0), kLdF);
      st16(T10, kLdF, c, 1.0f);
    } else if (warp == 1) {
      mm16(c, Lb(3, 2), kLdF, Ablk(2, 2), kLdF);
      st16(T32, kLdF, c, 1.0f);
    } else if (warp == 2) {
      mm16(c, Lb(2, 0), kLdF, Ablk(0, 0), kLdF);
      st16(P00, kLdF, c, 1.0f);
    } else {
      mm16(c, Lb(3, 0), kLdF, Ablk(0, 0), kLdF);
      st16(P10, kLdF, c, 1.0f);
    }
    __syncthreads();
    zero16(c);
    if (warp == 0) {  // A10 = -X1 L10 X0
      mm16(c, Ablk(1, 1), kLdF, T10, kLdF);
      st16(Ablk(1, 0), kLdF, c, -1.0f);
    } else if (warp == 1) {  // A32 = -X3 L32 X2
      mm16(c, Ablk(3, 3), kLdF, T32, kLdF);
      st16(Ablk(3, 2), kLdF, c, -1.0f);
    } else if (warp == 2) {
      mm16(c, Lb(2, 1), kLdF, Ablk(1, 1), kLdF);
      st16(P01, kLdF, c, 1.0f);
    } else {
      mm16(c, Lb(3, 1), kLdF, Ablk(1, 1), kLdF);
      st16(P11, kLdF, c, 1.0f);
    }
    __syncthreads();
    if (warp == 0) {
      ld16(c, P00, kLdF);
      mm16(c, Lb(2, 1), kLdF, Ablk(1, 0), kLdF);
      st16(P00, kLdF, c, 1.0f);
    } else if (warp == 1) {
      ld16(c, P10, kLdF);
      mm16(c, Lb(3, 1), kLdF, Ablk(1, 0), kLdF);
      st16(P10, kLdF, c, 1.0f);
    }
    __syncthreads();
    zero16(c);
    if (warp == 0) {  // A20 = -X2 P00
      mm16(c, Ablk(2, 2), kLdF, P00, kLdF);
      st16(Ablk(2, 0), kLdF, c, -1.0f);
    } else if (warp == 1) {  // A21 = -X2 P01
      mm16(c, Ablk(2, 2), kLdF, P01, kLdF);
      st16(Ablk(2, 1), kLdF, c, -1.0f);
    } else if (warp == 2) {  // A30 = -(A32 P00 + X3 P10)
      mm16(c, Ablk(3, 2), kLdF, P00, kLdF);
      mm16(c, Ablk(3, 3), kLdF, P10, kLdF);
      st16(Ablk(3, 0), kLdF, c, -1.0f);
    } else {  // A31 = -(A32 P01 + X3 P11)
      mm16(c, Ablk(3, 2), kLdF, P01, kLdF);
      mm16(c, Ablk(3, 3), kLdF, P11, kLdF);
      st16(Ablk(3, 1), kLdF, c, -1.0f);
    }
    __syncthreads();
  }

  // W = A diag(beta e^G) K and U = A diag(beta) V: A fragments straight from the fp32 tile, scaled and
  // rounded to bf16 on the way (A is lower triangular: k-steps right of the diagonal are skipped, and the
  // upper halves of the diagonal blocks are zero).
  auto frag_a_scaled = [&](uint32_t a[4], int ks, const float* scale) {
    const float* p = Af + (warp * 16 + gq) * kLdF + ks * 16 + 2 * tq;
    const float* sc = scale + ks * 16 + 2 * tq;
    const float2 x0 = *reinterpret_cast<const float2*>(p), x1 = *reinterpret_cast<const float2*>(p + 8 * kLdF);
    const float2 x2 = *reinterpret_cast<const float2*>(p + 8), x3 = *reinterpret_cast<const float2*>(p + 8 * kLdF + 8);
    a[0] = detail::pack_bf16(x0.x * sc[0], x0.y * sc[1]);
    a[1] = detail::pack_bf16(x1.x * sc[0], x1.y * sc[1]);
    a[2] = detail::pack_bf16(x2.x * sc[8], x2.y * sc[9]);
    a[3] = detail::pack_bf16(x3.x * sc[8], x3.y * sc[9]);
  };
  const int r = warp * 16 + gq;
  {
    float acc[DK / 8][4] = {};
#pragma unroll
    for (int ks = 0; ks < kC / 16; ++ks) {
      if (ks > warp) break;
      uint32_t a[4];
      frag_a_scaled(a, ks, BWs);
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
      frag_a_scaled(a, ks, Bs);
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
  const size_t smem = PrepSmem<DK>::bytes;
  raise_smem_limit(gdn_prep_kernel<DK>, smem);
  const unsigned chunks = lead ? 1u : unsigned(max_chunks);
  gdn_prep_kernel<DK><<<dim3(chunks, unsigned(s.H), unsigned(s.N)), kThreads, smem, stream>>>(s, q, k, v, g, beta,
                                                                                             cu, lead, w, 0, false);
  HYPIC_CUDA_LAUNCH_CHECK();
}

template <int DK>
void launch_range(const GdnShape& s, const bf16* q, const bf16* k, const bf16* v, const float* g, const float* beta,
                  const int32_t* cu, int64_t c_begin, int64_t c_end, const Workspace& w, cudaStream_t stream) {
  const size_t smem = PrepSmem<DK>::bytes;
  raise_smem_limit(gdn_prep_kernel<DK>, smem);
  gdn_prep_kernel<DK><<<dim3(unsigned(s.H), unsigned(c_end - c_begin), unsigned(s.N)), kThreads, smem, stream>>>(
      s, q, k, v, g, beta, cu, nullptr, w, c_begin, true);
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
