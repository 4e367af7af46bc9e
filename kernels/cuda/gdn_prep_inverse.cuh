// The pieces of gdn_prep that do not depend on how its products are issued (gdn_prep.cu on mma.sync,
// gdn_prep_sm90.cu on wgmma): the chunk's decay scan and the inverse A = (I + L)^-1 of its strictly lower L,
// in place over an fp32 [64][kLdA] tile in shared memory, by one block of four warps.
//
// The inverse. The four 16 x 16 diagonal blocks of I + L are unit lower triangular: one warp each inverts its
// block by forward substitution in fp32 (lane c owns column c). The off-diagonal blocks follow from (I + L) A = I
// as the inverse of a block-triangular matrix, 16 x 16 products scheduled over the 4 warps in 4 steps (below).
// Those products stay fp32 accurate to ~16 bits by splitting every operand into bf16 hi + lo and summing the
// three significant cross products on tensor cores: A is only rounded to bf16 once, with its column scaling, as
// the operand of W and U. The upper off-diagonal blocks hold temporaries afterwards; the upper halves of the
// diagonal blocks are zero.
#pragma once
#include "kernels/cuda/gdn_common.cuh"

namespace hypic::cuda::gdn::prep {

constexpr int kLdA = kC + 8;  // fp32 64-wide tile; 72 = 8 mod 32 keeps float2 fragment loads clean

// The chunk a prep block takes. heads_fast: grid (heads, chunks), so that blocks start chunk by chunk
// (launch_prep_range); else (chunks, heads). With `lead`, one block per sequence prepares only the chunk holding
// row lead[n], its rows before it made no-ops (g = 0, beta = 0), into the compact tile h * w.slots + n of a bodies
// workspace. live is false for a chunk past its sequence's end.
struct Chunk {
  int64_t n, h, kh, t0, tile;
  int L, skip;
  bool live;
};
__device__ __forceinline__ Chunk locate(const GdnShape& s, const int32_t* cu, const int32_t* lead, const Workspace& w,
                                        int64_t chunk_base, bool heads_fast) {
  Chunk c;
  c.n = blockIdx.z;
  c.h = heads_fast ? blockIdx.x : blockIdx.y;
  const SeqRange sr = seq_range(cu, c.n, s.T);
  const int64_t chunk = lead ? lead[c.n] / kC : chunk_base + int64_t(heads_fast ? blockIdx.y : blockIdx.x);
  c.skip = lead ? int(lead[c.n] - chunk * kC) : 0;
  c.t0 = sr.bos + chunk * kC;
  c.live = c.t0 < sr.eos;
  c.L = int(sr.eos - c.t0 < kC ? sr.eos - c.t0 : kC);
  c.kh = c.h / (s.H / s.Hk);
  c.tile = lead ? c.h * w.slots + c.n : c.h * w.slots + first_slot(sr.bos, c.n) + chunk;
  return c;
}

// A lane's two tokens of g and beta (load_decay), issued before the chunk's tile copies so that their latency
// overlaps the copies' instead of following it (scan_decay then only waits for them).
struct DecayIn {
  float g0, g1, b0, b1;
};
__device__ __forceinline__ DecayIn load_decay(const float* __restrict__ g, const float* __restrict__ beta, int64_t t0,
                                              int64_t H, int64_t h, int L, int skip) {
  const int lane = threadIdx.x % 32;
  const int i0 = lane * 2, i1 = lane * 2 + 1;
  const bool live0 = i0 < L && i0 >= skip, live1 = i1 < L && i1 >= skip;
  DecayIn d;
  d.g0 = live0 ? g[(t0 + i0) * H + h] : 0.0f;
  d.g1 = live1 ? g[(t0 + i1) * H + h] : 0.0f;
  d.b0 = live0 ? beta[(t0 + i0) * H + h] : 0.0f;
  d.b1 = live1 ? beta[(t0 + i1) * H + h] : 0.0f;
  return d;
}

// Inclusive scan of g over the chunk by warp 0 (two tokens a lane): G (also to the workspace's G of `tile`),
// beta and beta e^G into shared memory. Tokens at or past L, and before `skip`, add 0 to G and have beta 0.
// Ef (the Hopper prep with Aqk; null elsewhere): the chunk's decays split at the midpoint c of its G, so that
// store_l_aqk scales entry (i, j) by one product Ef[i] Ef[64 + j] = e^{G_i - c} e^{c - G_j} instead of an exponential:
// Ef[0..63] = e^{G_j - c}, Ef[64..127] = e^{c - G_j}, Ef[128] = 1 where every factor is within e^{+-80} (G spans at
// most 160 in the chunk), else 0 and store_l_aqk takes e^{G_i - G_j} entry by entry.
constexpr int kEf = 2 * kC + 4;  // floats
__device__ __forceinline__ void scan_decay(const DecayIn& d, float* wG, float* Gs, float* Bs, float* BWs,
                                           float* Ef = nullptr) {
  const int lane = threadIdx.x % 32;
  const int i0 = lane * 2, i1 = lane * 2 + 1;
  const float a = d.g0;
  const float b = a + d.g1;
  float incl = b;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const float y = __shfl_up_sync(0xffffffffu, incl, o);
    if (lane >= o) incl += y;
  }
  Gs[i0] = incl - b + a;
  Gs[i1] = incl;
  wG[i0] = incl - b + a;
  wG[i1] = incl;
  Bs[i0] = d.b0;
  Bs[i1] = d.b1;
  BWs[i0] = d.b0 * __expf(incl - b + a);
  BWs[i1] = d.b1 * __expf(incl);
  if (Ef != nullptr) {
    const float ga = incl - b + a, gb = incl;
    float mn = fminf(ga, gb), mx = fmaxf(ga, gb);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      mn = fminf(mn, __shfl_xor_sync(0xffffffffu, mn, o));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    }
    const float c = 0.5f * (mn + mx);
    Ef[i0] = __expf(ga - c);
    Ef[i1] = __expf(gb - c);
    Ef[kC + i0] = __expf(c - ga);
    Ef[kC + i1] = __expf(c - gb);
    if (lane == 0) Ef[2 * kC] = mx - mn <= 160.0f ? 1.0f : 0.0f;
  }
}
__device__ __forceinline__ void scan_decay(const float* __restrict__ g, const float* __restrict__ beta, int64_t t0,
                                           int64_t H, int64_t h, int L, int skip, float* wG, float* Gs, float* Bs,
                                           float* BWs) {
  scan_decay(load_decay(g, beta, t0, H, h, L, skip), wG, Gs, Bs, BWs);
}

// L = strict-lower(beta_i e^{G_i - G_j} (K K^T)_ij) into Af, rows i of this thread from the accumulator
// fragments of its warp's 16 rows: kk(nt, e) = (K K^T)(16 w + g + 8 (e / 2), 8 nt + 2 t + e % 2). Rows at or
// past L are zero.
template <typename Acc>
__device__ __forceinline__ void store_l(float* Af, const Acc& kk, const float* Gs, const float* Bs, int L) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, gq = lane / 4, tq = lane % 4;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int i = warp * 16 + gq + half * 8;
    const float bi = Bs[i], gi = Gs[i];
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
      const int j = nt * 8 + 2 * tq;
      const float l0 = (j < i && i < L) ? bi * __expf(gi - Gs[j]) * kk(nt, 2 * half) : 0.0f;
      const float l1 = (j + 1 < i && i < L) ? bi * __expf(gi - Gs[j + 1]) * kk(nt, 2 * half + 1) : 0.0f;
      *reinterpret_cast<float2*>(Af + i * kLdA + j) = make_float2(l0, l1);
    }
  }
}

// Aqk = tril(Q K^T) o e^{G_i - G_j} (diagonal included) to the workspace tile dst ([64][64] bf16), from the
// accumulator fragments of this warp's 16 rows as in store_l.
template <typename Acc>
__device__ __forceinline__ void store_aqk(bf16* dst, const Acc& qk, const float* Gs) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, gq = lane / 4, tq = lane % 4;
  const int ra = warp * 16 + gq, rb = ra + 8;
  const float ga = Gs[ra], gb = Gs[rb];
#pragma unroll
  for (int nt = 0; nt < 8; ++nt) {
    const int j = nt * 8 + 2 * tq;
    const float gj0 = Gs[j], gj1 = Gs[j + 1];
    st_bf16x2(dst + ra * kC + j, j <= ra ? qk(nt, 0) * __expf(ga - gj0) : 0.0f,
              j + 1 <= ra ? qk(nt, 1) * __expf(ga - gj1) : 0.0f);
    st_bf16x2(dst + rb * kC + j, j <= rb ? qk(nt, 2) * __expf(gb - gj0) : 0.0f,
              j + 1 <= rb ? qk(nt, 3) * __expf(gb - gj1) : 0.0f);
  }
}

// store_l and store_aqk in one pass over the same fragments (the Hopper prep has both accumulators at once):
// both scale entry (i, j) by e^{G_i - G_j}, computed once here; the results are those of the two calls.
// With Ef (scan_decay's split decays) the factor is Ef[i] Ef[64 + j] where Ef[128] allows it.
template <typename AccK, typename AccQ>
__device__ __forceinline__ void store_l_aqk(float* Af, bf16* dst, const AccK& kk, const AccQ& qk, const float* Gs,
                                            const float* Bs, int L, const float* Ef = nullptr) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, gq = lane / 4, tq = lane % 4;
  if (Ef != nullptr && Ef[2 * kC] != 0.0f) {  // block-uniform
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int i = warp * 16 + gq + half * 8;
      const float bi = Bs[i], ei = Ef[i];
      const bool live = i < L;
#pragma unroll
      for (int nt = 0; nt < 8; ++nt) {
        const int j = nt * 8 + 2 * tq;
        float2 l = make_float2(0.0f, 0.0f), a = make_float2(0.0f, 0.0f);
        if (nt * 8 <= warp * 16 + 15) {
          const float2 ej = *reinterpret_cast<const float2*>(Ef + kC + j);
          const float e0 = j <= i ? ei * ej.x : 0.0f;
          const float e1 = j + 1 <= i ? ei * ej.y : 0.0f;
          l.x = (j < i && live) ? bi * e0 * kk(nt, 2 * half) : 0.0f;
          l.y = (j + 1 < i && live) ? bi * e1 * kk(nt, 2 * half + 1) : 0.0f;
          a.x = j <= i ? qk(nt, 2 * half) * e0 : 0.0f;
          a.y = j + 1 <= i ? qk(nt, 2 * half + 1) * e1 : 0.0f;
        }
        *reinterpret_cast<float2*>(Af + i * kLdA + j) = l;
        st_bf16x2(dst + i * kC + j, a.x, a.y);
      }
    }
    return;
  }
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int i = warp * 16 + gq + half * 8;
    const float bi = Bs[i], gi = Gs[i];
    const bool live = i < L;
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
      const int j = nt * 8 + 2 * tq;
      float2 l = make_float2(0.0f, 0.0f), a = make_float2(0.0f, 0.0f);
      if (nt * 8 <= warp * 16 + 15) {  // else the tile is right of this warp's diagonal block: zeros
        const float e0 = j <= i ? __expf(gi - Gs[j]) : 0.0f;
        const float e1 = j + 1 <= i ? __expf(gi - Gs[j + 1]) : 0.0f;
        l.x = (j < i && live) ? bi * e0 * kk(nt, 2 * half) : 0.0f;
        l.y = (j + 1 < i && live) ? bi * e1 * kk(nt, 2 * half + 1) : 0.0f;
        a.x = j <= i ? qk(nt, 2 * half) * e0 : 0.0f;
        a.y = j + 1 <= i ? qk(nt, 2 * half + 1) * e1 : 0.0f;
      }
      *reinterpret_cast<float2*>(Af + i * kLdA + j) = l;
      st_bf16x2(dst + i * kC + j, a.x, a.y);
    }
  }
}

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
    detail::mma_bf16_16816(c[nt], ah, bh);
    detail::mma_bf16_16816(c[nt], ah, bl);
    detail::mma_bf16_16816(c[nt], al, bh);
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

// Diagonal blocks, in place: X_b = (I + L_bb)^-1, warp b, lane c < 16 runs column c. Row i of L is read into
// registers by the whole half-warp before any lane overwrites it with row i of X. The caller's block barrier
// follows.
__device__ __forceinline__ void invert_diagonal_blocks(float* Af) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane < 16) {
    const int c = lane;
    float* B = Af + warp * 16 * kLdA + warp * 16;
    float x[16];
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      float l[16];
#pragma unroll
      for (int j = 0; j < i; ++j) l[j] = B[i * kLdA + j];
      __syncwarp(0x0000ffffu);
      float acc = i == c ? 1.0f : 0.0f;
#pragma unroll
      for (int j = 0; j < i; ++j) acc -= l[j] * x[j];
      x[i] = acc;
      B[i * kLdA + c] = acc;
    }
  }
}

// Off-diagonal blocks (after invert_diagonal_blocks and a block barrier), as the inverse of a 2 x 2
// block-triangular matrix twice over: first the two 32 x 32 diagonal inverses Y0 = [X0 0; A10 X1],
// Y1 = [X2 0; A32 X3], then the lower-left 32 x 32 block -Y1 L' Y0 (L' = [L20 L21; L30 L31]) as P = L' Y0 and
// -Y1 P. Temporaries live in A's (unused) upper blocks. Four barrier steps, the last one included; at most two
// 16 x 16 products per warp and step.
__device__ __forceinline__ void invert_off_diagonal(float* Af) {
  const int warp = threadIdx.x / 32;
  // L's off-diagonal blocks sit where A's will go; each is read for the last time before it is replaced.
  auto Lb = [&](int i, int j) { return Af + i * 16 * kLdA + j * 16; };
  auto Ablk = [&](int i, int j) { return Af + i * 16 * kLdA + j * 16; };
  float* T10 = Ablk(0, 1);  // L10 X0
  float* T32 = Ablk(2, 3);  // L32 X2
  float* P00 = Ablk(0, 2);  // L20 X0, then + L21 A10
  float* P10 = Ablk(0, 3);  // L30 X0, then + L31 A10
  float* P01 = Ablk(1, 2);  // L21 X1
  float* P11 = Ablk(1, 3);  // L31 X1
  float c[2][4];
  zero16(c);
  if (warp == 0) {
    mm16(c, Lb(1, 0), kLdA, Ablk(0, 0), kLdA);
    st16(T10, kLdA, c, 1.0f);
  } else if (warp == 1) {
    mm16(c, Lb(3, 2), kLdA, Ablk(2, 2), kLdA);
    st16(T32, kLdA, c, 1.0f);
  } else if (warp == 2) {
    mm16(c, Lb(2, 0), kLdA, Ablk(0, 0), kLdA);
    st16(P00, kLdA, c, 1.0f);
  } else {
    mm16(c, Lb(3, 0), kLdA, Ablk(0, 0), kLdA);
    st16(P10, kLdA, c, 1.0f);
  }
  __syncthreads();
  zero16(c);
  if (warp == 0) {  // A10 = -X1 L10 X0
    mm16(c, Ablk(1, 1), kLdA, T10, kLdA);
    st16(Ablk(1, 0), kLdA, c, -1.0f);
  } else if (warp == 1) {  // A32 = -X3 L32 X2
    mm16(c, Ablk(3, 3), kLdA, T32, kLdA);
    st16(Ablk(3, 2), kLdA, c, -1.0f);
  } else if (warp == 2) {
    mm16(c, Lb(2, 1), kLdA, Ablk(1, 1), kLdA);
    st16(P01, kLdA, c, 1.0f);
  } else {
    mm16(c, Lb(3, 1), kLdA, Ablk(1, 1), kLdA);
    st16(P11, kLdA, c, 1.0f);
  }
  __syncthreads();
  if (warp == 0) {
    ld16(c, P00, kLdA);
    mm16(c, Lb(2, 1), kLdA, Ablk(1, 0), kLdA);
    st16(P00, kLdA, c, 1.0f);
  } else if (warp == 1) {
    ld16(c, P10, kLdA);
    mm16(c, Lb(3, 1), kLdA, Ablk(1, 0), kLdA);
    st16(P10, kLdA, c, 1.0f);
  }
  __syncthreads();
  zero16(c);
  if (warp == 0) {  // A20 = -X2 P00
    mm16(c, Ablk(2, 2), kLdA, P00, kLdA);
    st16(Ablk(2, 0), kLdA, c, -1.0f);
  } else if (warp == 1) {  // A21 = -X2 P01
    mm16(c, Ablk(2, 2), kLdA, P01, kLdA);
    st16(Ablk(2, 1), kLdA, c, -1.0f);
  } else if (warp == 2) {  // A30 = -(A32 P00 + X3 P10)
    mm16(c, Ablk(3, 2), kLdA, P00, kLdA);
    mm16(c, Ablk(3, 3), kLdA, P10, kLdA);
    st16(Ablk(3, 0), kLdA, c, -1.0f);
  } else {  // A31 = -(A32 P01 + X3 P11)
    mm16(c, Ablk(3, 2), kLdA, P01, kLdA);
    mm16(c, Ablk(3, 3), kLdA, P11, kLdA);
    st16(Ablk(3, 1), kLdA, c, -1.0f);
  }
  __syncthreads();
}

// The bf16 A fragment (16 x 16 at rows 16 w, columns 16 ks) of A diag(scale), straight from the fp32 tile Af.
__device__ __forceinline__ void frag_a_scaled(uint32_t a[4], const float* Af, int ks, const float* scale) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, gq = lane / 4, tq = lane % 4;
  const float* p = Af + (warp * 16 + gq) * kLdA + ks * 16 + 2 * tq;
  const float* sc = scale + ks * 16 + 2 * tq;
  const float2 x0 = *reinterpret_cast<const float2*>(p), x1 = *reinterpret_cast<const float2*>(p + 8 * kLdA);
  const float2 x2 = *reinterpret_cast<const float2*>(p + 8), x3 = *reinterpret_cast<const float2*>(p + 8 * kLdA + 8);
  a[0] = detail::pack_bf16(x0.x * sc[0], x0.y * sc[1]);
  a[1] = detail::pack_bf16(x1.x * sc[0], x1.y * sc[1]);
  a[2] = detail::pack_bf16(x2.x * sc[8], x2.y * sc[9]);
  a[3] = detail::pack_bf16(x3.x * sc[8], x3.y * sc[9]);
}

}  // namespace hypic::cuda::gdn::prep
