// Dense items are small fp32 matrix products ([dk, dk] x [dk, n], dk and n ~ 128): a 64 x 64 output tile
// per block, 16-deep K slices in shared memory, 4 x 4 outputs per thread, FMA in fp32 (states and
// operators are kept at full precision, the products are a negligible share of a request).
#include "kernels/cuda/check.h"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/transfer_operator.h"

namespace hypic::cuda {
namespace {

constexpr int kTile = 64, kDepth = 16, kThreads = 256;

// out[h] (M x N) = A[h] (M x M) @ B[h] (M x N) + C[h] for head h = blockIdx.z % H; one 64 x 64 tile.
__device__ void dense_tile(int H, int M, int N, const float* A, const float* B, const float* C, float* out) {
  __shared__ float As[kDepth][kTile + 4];  // As[kk][row]
  __shared__ float Bs[kDepth][kTile + 4];  // Bs[kk][col]
  const int h = blockIdx.z % H;
  const float* a = A + int64_t(h) * M * M;
  const float* bb = B + int64_t(h) * M * N;
  const float* cc = C ? C + int64_t(h) * M * N : nullptr;
  float* o = out + int64_t(h) * M * N;
  const int r0 = blockIdx.y * kTile, n0 = blockIdx.x * kTile;
  const int tr = threadIdx.x / 16, tc = threadIdx.x % 16;  // 16 x 16 threads, 4 x 4 outputs each
  float acc[4][4] = {};
  for (int k0 = 0; k0 < M; k0 += kDepth) {
    for (int e = threadIdx.x; e < kDepth * kTile; e += kThreads) {
      const int kk = e % kDepth, r = e / kDepth;  // A rows: consecutive threads walk k (contiguous in A)
      As[kk][r] = (r0 + r < M && k0 + kk < M) ? a[int64_t(r0 + r) * M + k0 + kk] : 0.0f;
      const int c = e % kTile, k2 = e / kTile;  // B rows: consecutive threads walk columns
      Bs[k2][c] = (k0 + k2 < M && n0 + c < N) ? bb[int64_t(k0 + k2) * N + n0 + c] : 0.0f;
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < kDepth; ++kk) {
      float av[4], bv[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) av[i] = As[kk][tr + 16 * i];
#pragma unroll
      for (int j = 0; j < 4; ++j) bv[j] = Bs[kk][tc + 16 * j];
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] = fmaf(av[i], bv[j], acc[i][j]);
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int r = r0 + tr + 16 * i, c = n0 + tc + 16 * j;
      if (r < M && c < N) {
        const int64_t idx = int64_t(r) * N + c;
        o[idx] = acc[i][j] + (cc ? cc[idx] : 0.0f);
      }
    }
}

// Batched: item b = blockIdx.z / H reads its pointers from device arrays; per-item strides are head strides.
__global__ void __launch_bounds__(kThreads) dense_kernel(int H, int M, int N, const float* const* A,
                                                         const float* const* B, const float* const* C,
                                                         float* const* out) {
  const int b = blockIdx.z / H;
  dense_tile(H, M, N, A[b], B[b], C ? C[b] : nullptr, out[b]);
}

// One item, pointers passed by value (no pointer array to upload).
__global__ void __launch_bounds__(kThreads) dense_one_kernel(int H, int M, int N, const float* A, const float* B,
                                                             const float* C, float* out) {
  dense_tile(H, M, N, A, B, C, out);
}

// Scalar / diagonal: out = t * s0 + sb elementwise, t per head (Scalar) or per head row (Diagonal).
__global__ void diag_apply_kernel(int H, int dk, int dv, bool scalar, const float* const* T, const float* const* S0,
                                  const float* const* Sb, float* const* out) {
  const int b = blockIdx.y;
  const int64_t n = int64_t(H) * dk * dv;
  const float* sb = Sb ? Sb[b] : nullptr;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t hr = i / dv;  // head * dk + row
    const float t = scalar ? T[b][hr / dk] : T[b][hr];
    out[b][i] = t * S0[b][i] + (sb ? sb[i] : 0.0f);
  }
}

__global__ void diag_compose_kernel(int64_t n, const float* const* T2, const float* const* T1, float* const* out) {
  const int b = blockIdx.y;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    out[b][i] = T2[b][i] * T1[b][i];
}

void check(const TransferShape& s, int64_t batch, const char* op) {
  HYPIC_CUDA_REQUIRE(s.H > 0 && s.dk > 0 && s.dv > 0, std::string(op) + ": empty shape");
  HYPIC_CUDA_REQUIRE(batch >= 0 && batch <= 65535 && s.H * batch <= 65535 * 64, std::string(op) + ": batch too large");
}

}  // namespace

void transfer_apply_batched(const TransferShape& s, int64_t batch, const float* const* T, const float* const* S0,
                            const float* const* S_body, float* const* out, cudaStream_t stream) {
  check(s, batch, "transfer_apply_batched");
  if (batch == 0) return;
  if (s.kind == TransferKind::Dense) {
    HYPIC_CUDA_REQUIRE(s.H * batch <= 65535, "transfer_apply_batched: H * batch must be <= 65535");
    const dim3 grid(unsigned((s.dv + kTile - 1) / kTile), unsigned((s.dk + kTile - 1) / kTile),
                    unsigned(s.H * batch));
    dense_kernel<<<grid, kThreads, 0, stream>>>(int(s.H), int(s.dk), int(s.dv), T, S0, S_body, out);
  } else {
    const int64_t n = s.H * s.dk * s.dv;
    const dim3 grid(unsigned(std::min<int64_t>((n + 255) / 256, 1024)), unsigned(batch));
    diag_apply_kernel<<<grid, 256, 0, stream>>>(int(s.H), int(s.dk), int(s.dv), s.kind == TransferKind::Scalar, T,
                                                S0, S_body, out);
  }
  HYPIC_CUDA_LAUNCH_CHECK();
}

void transfer_apply(const TransferShape& s, const float* T, const float* S0, const float* S_body, float* out,
                    cudaStream_t stream) {
  check(s, 1, "transfer_apply");
  HYPIC_CUDA_REQUIRE(s.kind == TransferKind::Dense, "transfer_apply: only the Dense kind has a one-item path");
  HYPIC_CUDA_REQUIRE(s.H <= 65535, "transfer_apply: H must be <= 65535");
  const dim3 grid(unsigned((s.dv + kTile - 1) / kTile), unsigned((s.dk + kTile - 1) / kTile), unsigned(s.H));
  dense_one_kernel<<<grid, kThreads, 0, stream>>>(int(s.H), int(s.dk), int(s.dv), T, S0, S_body, out);
  HYPIC_CUDA_LAUNCH_CHECK();
}

void transfer_compose_batched(const TransferShape& s, int64_t batch, const float* const* T2, const float* const* T1,
                              float* const* out, cudaStream_t stream) {
  check(s, batch, "transfer_compose_batched");
  if (batch == 0) return;
  if (s.kind == TransferKind::Dense) {
    HYPIC_CUDA_REQUIRE(s.H * batch <= 65535, "transfer_compose_batched: H * batch must be <= 65535");
    const dim3 grid(unsigned((s.dk + kTile - 1) / kTile), unsigned((s.dk + kTile - 1) / kTile),
                    unsigned(s.H * batch));
    dense_kernel<<<grid, kThreads, 0, stream>>>(int(s.H), int(s.dk), int(s.dk), T2, T1, nullptr, out);
  } else {
    const int64_t n = s.kind == TransferKind::Scalar ? s.H : s.H * s.dk;
    const dim3 grid(unsigned(std::min<int64_t>((n + 255) / 256, 1024)), unsigned(batch));
    diag_compose_kernel<<<grid, 256, 0, stream>>>(n, T2, T1, out);
  }
  HYPIC_CUDA_LAUNCH_CHECK();
}

}  // namespace hypic::cuda
