// Flash-style attention prefill. Block = 4 warps = 64 query rows of one query head; warp w owns rows
// 16w..16w+15. Per key tile of 64: S = Q K^T (mma.sync, fp32 in registers), mask by position, online
// softmax in base 2 on the accumulator fragments (a row's 8 values live in one quad of lanes), P is
// repacked from the S fragments straight into A fragments (no shared-memory round trip), O += P V with
// V's B fragments loaded by ldmatrix.trans. Head dim is a template (64 / 128 / 256, zero-padded above d).
#include <cfloat>
#include <climits>

#include "kernels/cuda/attention.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/mma.cuh"

namespace hypic::cuda {
namespace {

using detail::mma_bf16_16816;

constexpr int kBM = 64, kBN = 64, kThreads = 128;

template <int D>
struct Smem {
  static constexpr int kLd = D + 8;  // +16 bytes per row: conflict-free fragment loads and ldmatrix
  static constexpr size_t q = 0;
  static constexpr size_t k = q + sizeof(__nv_bfloat16) * kBM * kLd;
  static constexpr size_t v = k + sizeof(__nv_bfloat16) * kBN * kLd;
  static constexpr size_t kpos = v + sizeof(__nv_bfloat16) * kBN * kLd;
  static constexpr size_t bytes = kpos + sizeof(int64_t) * kBN;
};

template <int D>
__global__ void __launch_bounds__(kThreads) attention_prefill_kernel(AttentionShape s, const bf16* __restrict__ q,
                                                                     const bf16* __restrict__ k,
                                                                     const bf16* __restrict__ v,
                                                                     const int64_t* __restrict__ q_pos,
                                                                     const int64_t* __restrict__ k_pos,
                                                                     float scale_log2, bf16* __restrict__ out) {
  using SM = Smem<D>;
  constexpr int kLd = SM::kLd;
  constexpr int kNt = D / 8;  // n8 tiles of the output
  extern __shared__ __align__(128) unsigned char smem[];
  bf16* Qs = reinterpret_cast<bf16*>(smem + SM::q);
  bf16* Ks = reinterpret_cast<bf16*>(smem + SM::k);
  bf16* Vs = reinterpret_cast<bf16*>(smem + SM::v);
  int64_t* Kp = reinterpret_cast<int64_t*>(smem + SM::kpos);

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, t = lane & 3;
  const int64_t h = blockIdx.y, kh = h / (s.Hq / s.Hkv);
  const int64_t m0 = int64_t(blockIdx.x) * kBM;
  const int d = int(s.d);
  const int rows = int(s.Tq - m0 < kBM ? s.Tq - m0 : kBM);

  detail::load_tile_bf16(Qs, kLd, q + (m0 * s.Hq + h) * d, s.Hq * d, rows, d, kBM, D);
  // This thread's two rows and the block's last visible position.
  const int r_lo = warp * 16 + g, r_hi = r_lo + 8;
  const int64_t qp_lo = r_lo < rows ? q_pos[m0 + r_lo] : LLONG_MIN;
  const int64_t qp_hi = r_hi < rows ? q_pos[m0 + r_hi] : LLONG_MIN;
  __shared__ int64_t block_max_pos;
  if (threadIdx.x == 0) block_max_pos = LLONG_MIN;
  __syncthreads();
  if (threadIdx.x < kBM && threadIdx.x < rows) atomicMax(reinterpret_cast<long long*>(&block_max_pos),
                                                         static_cast<long long>(q_pos[m0 + threadIdx.x]));
  __syncthreads();
  const int64_t max_pos = block_max_pos;

  float o[kNt][4];
#pragma unroll
  for (int i = 0; i < kNt; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
  float m_lo = -INFINITY, m_hi = -INFINITY, l_lo = 0.0f, l_hi = 0.0f;

  for (int64_t j0 = 0; j0 < s.Tk; j0 += kBN) {
    const int cols = int(s.Tk - j0 < kBN ? s.Tk - j0 : kBN);
    // Skip tiles no query of the block can see (e.g. the upper triangle of causal prefill).
    int64_t kp = LLONG_MAX;
    if (threadIdx.x < kBN) {
      kp = threadIdx.x < cols ? k_pos[j0 + threadIdx.x] : LLONG_MAX;
      Kp[threadIdx.x] = kp;
    }
    if (!__syncthreads_or(threadIdx.x < kBN && kp <= max_pos)) continue;
    detail::load_tile_bf16(Ks, kLd, k + (j0 * s.Hkv + kh) * d, s.Hkv * d, cols, d, kBN, D);
    detail::load_tile_bf16(Vs, kLd, v + (j0 * s.Hkv + kh) * d, s.Hkv * d, cols, d, kBN, D);
    __syncthreads();

    // S = Q K^T for this warp's 16 rows x 64 keys.
    float sc[kBN / 8][4];
#pragma unroll
    for (int nt = 0; nt < kBN / 8; ++nt) sc[nt][0] = sc[nt][1] = sc[nt][2] = sc[nt][3] = 0.0f;
#pragma unroll
    for (int ks = 0; ks < D / 16; ++ks) {
      uint32_t a[4];
      const bf16* qa = Qs + (warp * 16 + g) * kLd + ks * 16 + 2 * t;
      a[0] = detail::ld_smem_u32(qa);
      a[1] = detail::ld_smem_u32(qa + 8 * kLd);
      a[2] = detail::ld_smem_u32(qa + 8);
      a[3] = detail::ld_smem_u32(qa + 8 * kLd + 8);
#pragma unroll
      for (int nt = 0; nt < kBN / 8; ++nt) {
        uint32_t b[2];
        const bf16* kb = Ks + (nt * 8 + g) * kLd + ks * 16 + 2 * t;
        b[0] = detail::ld_smem_u32(kb);
        b[1] = detail::ld_smem_u32(kb + 8);
        mma_bf16_16816(sc[nt], a, b);
      }
    }
    // Mask and scale; tile row maxima across the quad.
    float tmax_lo = -INFINITY, tmax_hi = -INFINITY;
#pragma unroll
    for (int nt = 0; nt < kBN / 8; ++nt) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int64_t kpj = Kp[nt * 8 + 2 * t + e];
        sc[nt][e] = kpj <= qp_lo ? sc[nt][e] * scale_log2 : -INFINITY;
        sc[nt][2 + e] = kpj <= qp_hi ? sc[nt][2 + e] * scale_log2 : -INFINITY;
        tmax_lo = fmaxf(tmax_lo, sc[nt][e]);
        tmax_hi = fmaxf(tmax_hi, sc[nt][2 + e]);
      }
    }
#pragma unroll
    for (int off = 1; off < 4; off <<= 1) {
      tmax_lo = fmaxf(tmax_lo, __shfl_xor_sync(0xffffffffu, tmax_lo, off));
      tmax_hi = fmaxf(tmax_hi, __shfl_xor_sync(0xffffffffu, tmax_hi, off));
    }
    const float mn_lo = fmaxf(m_lo, tmax_lo), mn_hi = fmaxf(m_hi, tmax_hi);
    // A row that has seen no key yet keeps reference 0 so that exp2(-inf - ref) = 0, never NaN.
    const float ref_lo = mn_lo == -INFINITY ? 0.0f : mn_lo, ref_hi = mn_hi == -INFINITY ? 0.0f : mn_hi;
    const float al_lo = exp2f(m_lo - ref_lo), al_hi = exp2f(m_hi - ref_hi);
    m_lo = mn_lo;
    m_hi = mn_hi;
    l_lo *= al_lo;
    l_hi *= al_hi;
#pragma unroll
    for (int i = 0; i < kNt; ++i) {
      o[i][0] *= al_lo;
      o[i][1] *= al_lo;
      o[i][2] *= al_hi;
      o[i][3] *= al_hi;
    }
    // P = exp2(S - ref), packed into A fragments: k-step kk uses score tiles 2kk and 2kk + 1.
    uint32_t pa[kBN / 16][4];
#pragma unroll
    for (int nt = 0; nt < kBN / 8; ++nt) {
      const float p0 = exp2f(sc[nt][0] - ref_lo), p1 = exp2f(sc[nt][1] - ref_lo);
      const float p2 = exp2f(sc[nt][2] - ref_hi), p3 = exp2f(sc[nt][3] - ref_hi);
      l_lo += p0 + p1;
      l_hi += p2 + p3;
      pa[nt / 2][(nt % 2) * 2 + 0] = detail::pack_bf16(p0, p1);
      pa[nt / 2][(nt % 2) * 2 + 1] = detail::pack_bf16(p2, p3);
    }
    // O += P V.
#pragma unroll
    for (int kk = 0; kk < kBN / 16; ++kk) {
#pragma unroll
      for (int nt = 0; nt < kNt; nt += 2) {
        uint32_t b[4];
        detail::ldmatrix_x4_trans(b, Vs + (kk * 16 + (lane & 15)) * kLd + nt * 8 + (lane >> 4) * 8);
        mma_bf16_16816(o[nt], pa[kk], b);
        mma_bf16_16816(o[nt + 1], pa[kk], b + 2);
      }
    }
    __syncthreads();  // K/V/Kp are overwritten by the next tile
  }

#pragma unroll
  for (int off = 1; off < 4; off <<= 1) {
    l_lo += __shfl_xor_sync(0xffffffffu, l_lo, off);
    l_hi += __shfl_xor_sync(0xffffffffu, l_hi, off);
  }
  const float inv_lo = l_lo > 0.0f ? 1.0f / l_lo : 0.0f, inv_hi = l_hi > 0.0f ? 1.0f / l_hi : 0.0f;
#pragma unroll
  for (int nt = 0; nt < kNt; ++nt) {
    const int c = nt * 8 + 2 * t;
    if (c >= d) continue;
    if (r_lo < rows)
      *reinterpret_cast<uint32_t*>(out + ((m0 + r_lo) * s.Hq + h) * d + c) =
          detail::pack_bf16(o[nt][0] * inv_lo, o[nt][1] * inv_lo);
    if (r_hi < rows)
      *reinterpret_cast<uint32_t*>(out + ((m0 + r_hi) * s.Hq + h) * d + c) =
          detail::pack_bf16(o[nt][2] * inv_hi, o[nt][3] * inv_hi);
  }
}

template <int D>
void launch(const AttentionShape& s, const bf16* q, const bf16* k, const bf16* v, const int64_t* q_pos,
            const int64_t* k_pos, float scale, bf16* out, cudaStream_t stream) {
  const size_t smem = Smem<D>::bytes;
  HYPIC_CUDA_CHECK(cudaFuncSetAttribute(attention_prefill_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        int(smem)));
  const dim3 grid(unsigned((s.Tq + kBM - 1) / kBM), unsigned(s.Hq));
  attention_prefill_kernel<D><<<grid, kThreads, smem, stream>>>(s, q, k, v, q_pos, k_pos,
                                                                scale * 1.4426950408889634f, out);
  HYPIC_CUDA_LAUNCH_CHECK();
}

}  // namespace

void attention_prefill(const AttentionShape& s, const bf16* q, const bf16* k, const bf16* v, const int64_t* q_pos,
                       const int64_t* k_pos, float scale, bf16* out, cudaStream_t stream) {
  HYPIC_CUDA_REQUIRE(s.Hq > 0 && s.Hkv > 0 && s.Hq % s.Hkv == 0 && s.Hq <= 65535,
                     "attention_prefill: Hq must be a positive multiple of Hkv");
  HYPIC_CUDA_REQUIRE(s.d > 0 && s.d % 8 == 0 && s.d <= 256, "attention_prefill: head dim must be a multiple of 8, <= 256");
  HYPIC_CUDA_REQUIRE(s.Tq >= 0 && s.Tk >= 0, "attention_prefill: negative length");
  if (s.Tq == 0) return;
  if (s.d <= 64)
    launch<64>(s, q, k, v, q_pos, k_pos, scale, out, stream);
  else if (s.d <= 128)
    launch<128>(s, q, k, v, q_pos, k_pos, scale, out, stream);
  else
    launch<256>(s, q, k, v, q_pos, k_pos, scale, out, stream);
}

}  // namespace hypic::cuda
