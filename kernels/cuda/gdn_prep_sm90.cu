// gdn_prep on Hopper: gdn_prep.cu's four products (K K^T, Q K^T, W = A diag(beta e^G) K, U = A diag(beta) V) as
// warpgroup products (wgmma) of the whole 64-row chunk. gdn_prep.cu gives each warp its 16 rows' mma.sync
// fragments and skips the zero triangles, which leaves warp 3 four times warp 0's products before every barrier;
// at the 35B-A3B shape that kernel is latency-bound (4 blocks an SM, 0.46 eligible warps a scheduler). Here every
// product is a handful of instructions a warpgroup, issued whole (zeros included), and the decay scan, the scaling
// and the inverse are gdn_prep_inverse.cuh's, as in gdn_prep.cu, so the workspace it writes is the same up to the
// products' summation order. K, Q and V come into 128-byte swizzled boxes (cp.async, zero past the chunk), the
// layout wgmma reads both K-major (K K^T, Q K^T) and MN-major (K and V as the B of W and U); W and U are staged in
// it over K and V for 16-byte stores. dk 128, dv a multiple of 128, an sm_90 device; the default there (an H100,
// 35B-A3B shape: the chunked prefill 1.11x / 1.13x faster at 8k / 32k; HYPIC_CUDA_GDN_PREP_SM90=0 keeps gdn_prep.cu). For a workspace planned with U formed in the
// walk (plan_u_in_walk, w.V set) it writes -W and, in place of U, A diag(beta) (bf16 [64][64] in the first 64 columns
// of the chunk's UV tile), and never reads V; for one planned with W and U formed in the walk (plan_wu_in_walk, w.wu
// set) A diag(beta) alone, with Aqk and G.
#include "kernels/cuda/check.h"
#include "kernels/cuda/gdn_common.cuh"
#include "kernels/cuda/gdn_prep_inverse.cuh"
#include "kernels/cuda/gdn_sm90_tiles.cuh"
#include "kernels/cuda/sm90.cuh"
#include "kernels/cuda/sm90_host.h"
#include "kernels/cuda/smem_limit.h"

namespace hypic::cuda::gdn {
namespace {

constexpr int kNT = 128;  // one warpgroup; warp w holds rows 16 w .. 16 w + 15 of every product (as in gdn_prep.cu)
constexpr int kDK = 128;
constexpr int kBox = kSwBox;

struct Smem {
  static constexpr size_t k = 0;                          // K [2 boxes]; then W, staged for its stores
  static constexpr size_t qv = k + 2 * kBox;              // Q [2 boxes]; then V, 128 columns a pass; then U, staged
  static constexpr size_t a = qv + 2 * kBox;              // L, turned into A in place: fp32 [64][kLdA]
  static constexpr size_t gs = a + 4 * kC * prep::kLdA;  // G
  static constexpr size_t bs = gs + 4 * kC;               // beta
  static constexpr size_t ws = bs + 4 * kC;               // beta e^G
  static constexpr size_t ef = ws + 4 * kC;               // the split decays (scan_decay's Ef)
  static constexpr size_t bytes = ef + 4 * prep::kEf + 1024;  // + the slack that aligns the boxes: ~53 KB, 4 blocks an SM
};

// Byte offset of K slice ks (16 wide) of a K-major [64][128] tile in two SW128 boxes; and of row slice ks (16 rows)
// of an MN-major one.
__device__ __forceinline__ uint32_t kslice(int ks) { return uint32_t((ks / 4) * kBox + 32 * (ks % 4)); }
__device__ __forceinline__ uint32_t rslice(int ks) { return uint32_t(ks * 16 * 128); }

// This thread's fragments of a 64 x 64 fp32 accumulator, times sign, to an SW128 box ([64][64] bf16).
__device__ __forceinline__ void stage_sw(unsigned char* box, const float (&d)[32], float sign) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, gq = lane / 4, tq = lane % 4;
  const int r = 16 * warp + gq;
#pragma unroll
  for (int j = 0; j < 8; ++j) {  // columns 8 j .. 8 j + 7: 16-byte piece j
    *reinterpret_cast<uint32_t*>(box + sw128(r, j) + 4 * tq) = pack_bf16(sign * d[4 * j], sign * d[4 * j + 1]);
    *reinterpret_cast<uint32_t*>(box + sw128(r + 8, j) + 4 * tq) = pack_bf16(sign * d[4 * j + 2], sign * d[4 * j + 3]);
  }
}

// This thread's A fragments of a [64][64] matrix (frags_scaled's layout) to an SW128 box.
__device__ __forceinline__ void stage_frags(unsigned char* box, const uint32_t (&a)[4][4]) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, gq = lane / 4, tq = lane % 4;
  const int r = 16 * warp + gq;
#pragma unroll
  for (int ks = 0; ks < 4; ++ks) {  // columns 16 ks + 2 tq (pieces 2 ks) and 16 ks + 8 + 2 tq (pieces 2 ks + 1)
    *reinterpret_cast<uint32_t*>(box + sw128(r, 2 * ks) + 4 * tq) = a[ks][0];
    *reinterpret_cast<uint32_t*>(box + sw128(r + 8, 2 * ks) + 4 * tq) = a[ks][1];
    *reinterpret_cast<uint32_t*>(box + sw128(r, 2 * ks + 1) + 4 * tq) = a[ks][2];
    *reinterpret_cast<uint32_t*>(box + sw128(r + 8, 2 * ks + 1) + 4 * tq) = a[ks][3];
  }
}

// A [64][64 NB] bf16 tile in NB SW128 boxes to global memory (row stride ld elements), 16 bytes a thread and step:
// thread i takes piece i % P of rows i / P + R j (P = 8 NB pieces a row, R = 128 / P rows a step: a multiple of 8,
// so the same swizzle phase and one offset a step).
template <int NB>
__device__ __forceinline__ void store_sw(bf16* dst, int64_t ld, const unsigned char* src) {
  constexpr int P = 8 * NB, R = kNT / P;
  const int r0 = int(threadIdx.x) / P, pc = int(threadIdx.x) % P;
  bf16* out = dst + r0 * ld + pc * 8;
  const unsigned char* in = src + (pc / 8) * kBox + sw128(r0, pc % 8);
#pragma unroll
  for (int j = 0; j < kC / R; ++j)
    *reinterpret_cast<int4*>(out + j * R * ld) = *reinterpret_cast<const int4*>(in + j * R * 128);
}

// A diag(scale)'s bf16 fragments, the A operand of W and U: zero right of this warp's diagonal block (A is lower
// triangular, and its upper off-diagonal blocks hold the inverse's temporaries).
__device__ __forceinline__ void frags_scaled(uint32_t (&a)[4][4], const float* Af, const float* scale) {
  const int warp = threadIdx.x / 32;
#pragma unroll
  for (int ks = 0; ks < 4; ++ks) {
    if (ks <= warp) {
      prep::frag_a_scaled(a[ks], Af, ks, scale);
    } else {
#pragma unroll
      for (int r = 0; r < 4; ++r) a[ks][r] = 0u;
    }
  }
}

// X = sign A B over a [64][128] tile of two SW128 boxes, staged over it: A from registers (frags_scaled), B the tile
// (MN-major); each 64-column half in its own product (a 32-register accumulator) and staged over the box it read.
__device__ __forceinline__ void product_over(unsigned char* tile, const uint32_t (&a)[4][4], float sign) {
#pragma unroll 1
  for (int hf = 0; hf < 2; ++hf) {
    const uint64_t desc = sm90::desc_sw128(tile + hf * kBox, kBox, 1024);
    float d[32];
    sm90::wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < 4; ++ks) sm90::wgmma_m64n64k16_rs_mn(d, a[ks], sm90::desc_advance(desc, rslice(ks)), ks > 0);
    sm90::wgmma_commit();
    sm90::wgmma_wait<0>();
    sm90::fence_regs(d);
    __syncthreads();  // every warp's product has read the box
    stage_sw(tile + hf * kBox, d, sign);
  }
}

// One block per (chunk, value head, sequence), as gdn_prep_kernel (same grid forms, lead and ready flags). AQK:
// Q K^T too (Aqk for the walk that writes the outputs; never with lead). UW: U formed in the walk (w.V set). WU (with
// UW): W formed in the walk too (plan_wu_in_walk, w.wu set): no W product, only A diag(beta) is written.
template <bool AQK, bool UW, bool WU = false>
__global__ void __launch_bounds__(kNT, 4)
    gdn_prep_sm90_kernel(GdnShape s, const bf16* __restrict__ q, const bf16* __restrict__ k,
                         const bf16* __restrict__ v, const float* __restrict__ g, const float* __restrict__ beta,
                         const int32_t* __restrict__ cu, const int32_t* __restrict__ lead, Workspace w,
                         int64_t chunk_base, bool heads_fast) {
#if HYPIC_SM90A
  extern __shared__ unsigned char smem_raw[];
  unsigned char* smem = smem_raw + ((1024 - (sm90::smem_u32(smem_raw) & 1023)) & 1023);
  unsigned char* Ks = smem + Smem::k;
  unsigned char* QVs = smem + Smem::qv;
  float* Af = reinterpret_cast<float*>(smem + Smem::a);
  float* Gs = reinterpret_cast<float*>(smem + Smem::gs);
  float* Bs = reinterpret_cast<float*>(smem + Smem::bs);
  float* BWs = reinterpret_cast<float*>(smem + Smem::ws);

  const prep::Chunk ch = prep::locate(s, cu, lead, w, chunk_base, heads_fast);
  if (!ch.live) return;
  const int64_t H = s.H, h = ch.h, kh = ch.kh, t0 = ch.t0, tile = ch.tile;
  const int L = ch.L, skip = ch.skip;
  const int dv = int(s.dv);
  const int warp = threadIdx.x / 32;
  const bf16* vsrc = v + (t0 * H + h) * dv;

  // K and Q (or, without Aqk, the first 128 value columns) load while warp 0 scans the decays. Where prep runs as a
  // launch of its own, g and beta are requested before the copies (4% faster at 8k on an H100); beside the walk,
  // after them (measured 2% slower there the other way; why is not known).
  const bool early = w.ready == nullptr;
  // L and Aqk scaled by split decays (scan_decay's Ef) where prep runs as its own launch: 16 sequences 2-3% faster on
  // an H100; beside the walk no faster, and 1.5% slower at 32k with T.
  float* Ef = AQK && early ? reinterpret_cast<float*>(smem + Smem::ef) : nullptr;
  prep::DecayIn decay{};
  if (warp == 0 && early) decay = prep::load_decay(g, beta, t0, H, h, L, skip);
  load_sw<kNT>(Ks, k + (t0 * s.Hk + kh) * kDK, s.Hk * kDK, L);
  if (AQK)
    load_sw<kNT>(QVs, q + (t0 * s.Hk + kh) * kDK, s.Hk * kDK, L);
  else if (!UW)
    load_sw<kNT>(QVs, vsrc, H * dv, L);
  cp_async_commit();
  if (warp == 0) {
    if (!early) decay = prep::load_decay(g, beta, t0, H, h, L, skip);
    prep::scan_decay(decay, w.G + tile * kC, Gs, Bs, BWs, Ef);
  }
  cp_async_wait_all();
  sm90::fence_proxy_async_shared();  // the copies, before the products read them
  __syncthreads();

  // K K^T, then Q K^T in a second group; both operands K-major from the boxes. L (and Aqk) from the fragments: this
  // warp's 16 rows, the layout gdn_prep.cu's mma.sync accumulators have.
  {
    const uint64_t dK = sm90::desc_sw128(Ks, 16, 1024), dQ = sm90::desc_sw128(QVs, 16, 1024);
    float kk[32], qk[32];
    sm90::wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < kDK / 16; ++ks)
      sm90::wgmma_m64n64k16_ss(kk, sm90::desc_advance(dK, kslice(ks)), sm90::desc_advance(dK, kslice(ks)), ks > 0);
    sm90::wgmma_commit();
    if (AQK) {
#pragma unroll
      for (int ks = 0; ks < kDK / 16; ++ks)
        sm90::wgmma_m64n64k16_ss(qk, sm90::desc_advance(dQ, kslice(ks)), sm90::desc_advance(dK, kslice(ks)), ks > 0);
      sm90::wgmma_commit();
    }
    sm90::wgmma_wait<0>();
    sm90::fence_regs(kk);
    if (AQK) {  // L and Aqk share their decays: one pass
      sm90::fence_regs(qk);
      prep::store_l_aqk(Af, w.Aqk + tile * kC * kC, [&](int nt, int e) { return kk[4 * nt + e]; },
                        [&](int nt, int e) { return qk[4 * nt + e]; }, Gs, Bs, L, Ef);
    } else {
      prep::store_l(Af, [&](int nt, int e) { return kk[4 * nt + e]; }, Gs, Bs, L);
    }
  }
  __syncwarp();  // a warp's diagonal block of L is its own rows
  prep::invert_diagonal_blocks(Af);
  __syncthreads();  // every warp's products are done: Q is read no more
  if (AQK && !UW) {
    load_sw<kNT>(QVs, vsrc, H * dv, L);
    cp_async_commit();
  }
  prep::invert_off_diagonal(Af);

  // W = A diag(beta e^G) K, staged over K and stored while V lands; then U = A diag(beta) V, 128 columns a pass,
  // staged over V.
  if (!WU) {
    uint32_t a[4][4];
    frags_scaled(a, Af, BWs);
    product_over(Ks, a, UW ? -1.0f : 1.0f);
  }
  if (UW) {  // A diag(beta) in U's place (Q, if any, is read no more since the barrier after the diagonal blocks)
    uint32_t a[4][4];
    frags_scaled(a, Af, Bs);
    stage_frags(QVs, a);
  }
  __syncthreads();
  if (!WU) store_sw<2>(w.W + tile * kC * kDK, kDK, Ks);
  if (UW) store_sw<1>(w.UV + tile * kC * w.dvp, w.dvp, QVs);
  for (int c0 = 0; c0 < (UW ? 0 : dv); c0 += 128) {
    if (c0 > 0) {
      __syncthreads();  // the last pass's U is stored
      load_sw<kNT>(QVs, vsrc + c0, H * dv, L);
      cp_async_commit();
    }
    cp_async_wait_all();
    sm90::fence_proxy_async_shared();
    __syncthreads();  // V landed
    uint32_t a[4][4];
    frags_scaled(a, Af, Bs);
    product_over(QVs, a, 1.0f);
    __syncthreads();
    store_sw<2>(w.UV + tile * kC * w.dvp + c0, w.dvp, QVs);
  }
  if (w.ready != nullptr && lead == nullptr) {  // every thread's stores of the tile, then its flag
    __syncthreads();
    if (threadIdx.x == 0) ready_release(w.ready + kReadyStride * tile);
  }
#endif
}

// HYPIC_CUDA_GDN_PREP_SM90=0: gdn_prep.cu's mma.sync form everywhere (A/B runs).
bool enabled() {
  static const bool on = !env_is("HYPIC_CUDA_GDN_PREP_SM90", "0");
  return on;
}

}  // namespace

bool prep_sm90_fits(const GdnShape& s, const bf16* q, const bf16* k, const bf16* v, const Workspace& w) {
  const auto a16 = [](const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; };
  return s.dk == kDK && w.dkp == kDK && s.dv % 128 == 0 && w.dvp == s.dv && a16(k) && a16(v) &&
         (q == nullptr || a16(q)) && current_device_is_sm90();
}

bool prep_sm90_applies(const GdnShape& s, const bf16* q, const bf16* k, const bf16* v, const Workspace& w) {
  return (enabled() || w.V != nullptr) && prep_sm90_fits(s, q, k, v, w);
}

void launch_prep_sm90(const GdnShape& s, const bf16* q, const bf16* k, const bf16* v, const float* g,
                      const float* beta, const int32_t* cu, const int32_t* lead, dim3 grid, int64_t chunk_base,
                      bool heads_fast, const Workspace& w, cudaStream_t stream) {
  const bool aqk = w.Aqk != nullptr && q != nullptr && lead == nullptr;
  auto go = [&](auto kernel) {
    raise_smem_limit(kernel, Smem::bytes);
    kernel<<<grid, kNT, Smem::bytes, stream>>>(s, q, k, v, g, beta, cu, lead, w, chunk_base, heads_fast);
  };
  if (w.V != nullptr) {
    HYPIC_CUDA_REQUIRE(lead == nullptr, "launch_prep_sm90: U formed in the walk takes no bodies");
    HYPIC_CUDA_REQUIRE(!w.wu || aqk, "launch_prep_sm90: W formed in the walk needs Aqk");
    if (w.wu)
      go(gdn_prep_sm90_kernel<true, true, true>);
    else if (aqk)
      go(gdn_prep_sm90_kernel<true, true>);
    else
      go(gdn_prep_sm90_kernel<false, true>);
  } else if (aqk) {
    go(gdn_prep_sm90_kernel<true, false>);
  } else {
    go(gdn_prep_sm90_kernel<false, false>);
  }
  HYPIC_CUDA_LAUNCH_CHECK();
}

}  // namespace hypic::cuda::gdn
