// KDA chunk preparation (kernels/cuda/kda_common.cuh), one block per (chunk, head, sequence), fp32 on the
// CUDA cores: the cumulative decays, the causal weights Akk and Aqk, the UT inverse, and the decayed key and
// query tiles the chunk walk multiplies on tensor cores.
//
// e^(Gam_i - Gam_j) for j <= i is <= 1, but splitting it into e^Gam_i e^-Gam_j overflows under strong decay.
// So the 16-row sub-chunks are paired through a reference row r (the first row of row i's sub-chunk):
// e^(Gam_i - Gam_r) and e^(Gam_r - Gam_j) are both <= 1 for j < r <= i, one exponential per row and channel
// instead of per pair; pairs inside one sub-chunk take the exponential of the difference directly.
#include "kernels/cuda/check.h"
#include "kernels/cuda/kda_common.cuh"
#include "kernels/cuda/smem_limit.h"

namespace hypic::cuda::kda {
namespace {

constexpr int kThreads = 256;
constexpr int kSub = 16;  // sub-chunk rows

template <int DK>
struct PrepSmem {
  bf16 k[kC][DK + 2];  // odd word stride: rows in distinct banks
  bf16 q[kC][DK + 2];
  float gam[kC][DK + 1];
  float akk[kC][kC + 1];
  float aqk[kC][kC + 1];
  float inv[kC][kC + 1];
  float xk[kSub][DK + 1], xq[kSub][DK + 1];  // rows of the reference sub-chunk, decayed to its first row
  float y[kC - kSub][DK + 1];                // earlier rows, decayed from their own row to the reference
  float beta[kC];
};

template <int DK>
__global__ void __launch_bounds__(kThreads) kda_prep_kernel(GdnShape s, const bf16* __restrict__ q,
                                                            const bf16* __restrict__ k, const float* __restrict__ g,
                                                            const float* __restrict__ beta,
                                                            const int32_t* __restrict__ cu, bool want_q,
                                                            Workspace w) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  auto& sm = *reinterpret_cast<PrepSmem<DK>*>(smem_raw);
  const int tid = threadIdx.x;
  const int64_t c = blockIdx.x, h = blockIdx.y, n = blockIdx.z;
  const gdn::SeqRange r = gdn::seq_range(cu, n, s.T);
  const int64_t t0 = r.bos + c * kC;
  if (t0 >= r.eos) return;
  const int L = int(r.eos - t0 < kC ? r.eos - t0 : kC);
  const int dk = int(s.dk);
  const int64_t H = s.H, Hk = s.Hk, kh = h / (H / Hk);
  const bf16 zero = __float2bfloat16_rn(0.0f);

  for (int e = tid; e < kC * DK; e += kThreads) {
    const int i = e / DK, d = e % DK;
    const bool ok = i < L && d < dk;
    sm.k[i][d] = ok ? k[((t0 + i) * Hk + kh) * dk + d] : zero;
    sm.q[i][d] = (ok && want_q) ? q[((t0 + i) * Hk + kh) * dk + d] : zero;
    sm.gam[i][d] = ok ? g[((t0 + i) * H + h) * dk + d] : 0.0f;  // rows past L: no decay, Gam repeats
  }
  if (tid < kC) sm.beta[tid] = tid < L ? beta[(t0 + tid) * H + h] : 0.0f;
  __syncthreads();
  if (tid < DK) {
    float acc = 0.0f;
    for (int i = 0; i < kC; ++i) {
      acc += sm.gam[i][tid];
      sm.gam[i][tid] = acc;
    }
  }
  __syncthreads();

  // Pairs inside a sub-chunk: 4 x 136 (i >= j), the exponential of each difference.
  constexpr int kTri = kSub * (kSub + 1) / 2;
  for (int p = tid; p < (kC / kSub) * kTri; p += kThreads) {
    const int I = p / kTri;
    int rem = p % kTri, a = 0;
    while (rem > a) rem -= ++a;  // rem = a (a + 1) / 2 + b, b <= a
    const int i = I * kSub + a, j = I * kSub + rem;
    float kk = 0.0f, qk = 0.0f;
    for (int d = 0; d < DK; ++d) {
      const float e = __expf(sm.gam[i][d] - sm.gam[j][d]);
      const float kj = __bfloat162float(sm.k[j][d]) * e;
      kk += __bfloat162float(sm.k[i][d]) * kj;
      qk += __bfloat162float(sm.q[i][d]) * kj;
    }
    sm.akk[i][j] = j < i ? sm.beta[i] * kk : 0.0f;
    sm.aqk[i][j] = qk;
  }
  // Pairs across sub-chunks, one reference sub-chunk I at a time (rows 16 I.., columns before 16 I).
  for (int I = 1; I < kC / kSub; ++I) {
    const int r0 = I * kSub;
    __syncthreads();  // the previous reference's xk/xq/y are consumed
    for (int e = tid; e < kSub * DK; e += kThreads) {
      const int a = e / DK, d = e % DK;
      const float x = __expf(sm.gam[r0 + a][d] - sm.gam[r0][d]);
      sm.xk[a][d] = __bfloat162float(sm.k[r0 + a][d]) * x;
      sm.xq[a][d] = __bfloat162float(sm.q[r0 + a][d]) * x;
    }
    for (int e = tid; e < r0 * DK; e += kThreads) {
      const int j = e / DK, d = e % DK;
      sm.y[j][d] = __bfloat162float(sm.k[j][d]) * __expf(sm.gam[r0][d] - sm.gam[j][d]);
    }
    __syncthreads();
    for (int p = tid; p < kSub * r0; p += kThreads) {
      const int a = p / r0, j = p % r0;
      float kk = 0.0f, qk = 0.0f;
      for (int d = 0; d < DK; ++d) {
        kk += sm.xk[a][d] * sm.y[j][d];
        qk += sm.xq[a][d] * sm.y[j][d];
      }
      sm.akk[r0 + a][j] = sm.beta[r0 + a] * kk;
      sm.aqk[r0 + a][j] = qk;
    }
  }
  __syncthreads();

  // inv = (I + Akk)^-1 by forward substitution, row after row; column c is solved by the 4 adjacent lanes
  // 4c..4c+3 of one warp, which split the sum and meet with shuffles (no block-wide barrier per row).
  {
    const int col = tid / 4, part = tid % 4;
    for (int i = 0; i < kC; ++i) {
      float acc = 0.0f;
      for (int j = part; j < i; j += 4) acc += sm.akk[i][j] * sm.inv[j][col];
      acc += __shfl_xor_sync(0xffffffffu, acc, 1);
      acc += __shfl_xor_sync(0xffffffffu, acc, 2);
      if (part == 0) sm.inv[i][col] = (i == col ? 1.0f : 0.0f) - acc;
      __syncwarp();
    }
  }
  __syncthreads();

  const int64_t tile = h * w.slots + gdn::first_slot(r.bos, n) + c;
  bf16* Qt = w.Qt + tile * kC * DK;
  bf16* Kt = w.Kt + tile * kC * DK;
  bf16* Kb = w.Kb + tile * kC * DK;
  for (int e = tid; e < kC * DK; e += kThreads) {
    const int i = e / DK, d = e % DK;
    const float ki = __bfloat162float(sm.k[i][d]), eg = __expf(sm.gam[i][d]);
    Kt[e] = __float2bfloat16_rn(ki * eg);
    Kb[e] = __float2bfloat16_rn(ki * __expf(sm.gam[kC - 1][d] - sm.gam[i][d]));
    if (want_q) Qt[e] = __float2bfloat16_rn(__bfloat162float(sm.q[i][d]) * eg);
  }
  bf16* M = w.M + tile * kC * kC;
  bf16* Aqk = w.Aqk + tile * kC * kC;
  for (int e = tid; e < kC * kC; e += kThreads) {
    const int i = e / kC, j = e % kC;
    M[e] = __float2bfloat16_rn(sm.inv[i][j] * sm.beta[j]);
    if (want_q) Aqk[e] = __float2bfloat16_rn(j <= i ? sm.aqk[i][j] : 0.0f);
  }
  if (tid < DK) w.GL[tile * DK + tid] = expf(sm.gam[kC - 1][tid]);
}

template <int DK>
void launch(const GdnShape& s, const bf16* q, const bf16* k, const float* g, const float* beta, const int32_t* cu,
            int64_t max_chunks, bool want_q, const Workspace& w, cudaStream_t stream) {
  const size_t smem = sizeof(PrepSmem<DK>);
  raise_smem_limit(kda_prep_kernel<DK>, smem);
  const dim3 grid(unsigned(max_chunks), unsigned(s.H), unsigned(s.N));
  kda_prep_kernel<DK><<<grid, kThreads, smem, stream>>>(s, q, k, g, beta, cu, want_q, w);
  HYPIC_CUDA_LAUNCH_CHECK();
}

}  // namespace

void launch_prep(const GdnShape& s, const bf16* q, const bf16* k, const float* g, const float* beta,
                 const int32_t* cu, int64_t max_chunks, bool want_q, const Workspace& w, cudaStream_t stream) {
  if (w.dkp == 64)
    launch<64>(s, q, k, g, beta, cu, max_chunks, want_q, w, stream);
  else
    launch<128>(s, q, k, g, beta, cu, max_chunks, want_q, w, stream);
}

}  // namespace hypic::cuda::kda
