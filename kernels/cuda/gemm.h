// Dense matrix products through cuBLASLt: y = x W^T with bf16 inputs and fp32 accumulation.
#pragma once
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <mutex>
#include <tuple>

#include "kernels/cuda/types.h"
#include "kernels/dtype.h"

namespace hypic::cuda {

// cuBLAS + cuBLASLt handles, a 32 MiB cuBLASLt workspace, and a cache of the heuristic's algorithm per
// problem shape, row counts above 16 bucketed to the next power of two (the heuristic query costs
// 0.2-0.3 ms of host time per new shape on the H200; HYPIC_BLAS_TRACE=1 prints each query and its time).
// One per device/thread.
class Blas {
 public:
  Blas();
  ~Blas();
  Blas(const Blas&) = delete;
  Blas& operator=(const Blas&) = delete;
  cublasHandle_t handle() const { return blas_; }
  cublasLtHandle_t lt() const { return lt_; }
  void* workspace() const { return ws_; }
  size_t workspace_bytes() const { return ws_bytes_; }

  // The cuBLASLt algorithm for a problem key, queried once and cached.
  using Key = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int, bool>;
  bool cached_algo(const Key& k, cublasLtMatmulAlgo_t* algo);
  void store_algo(const Key& k, const cublasLtMatmulAlgo_t& algo);

 private:
  cublasHandle_t blas_ = nullptr;
  cublasLtHandle_t lt_ = nullptr;
  void* ws_ = nullptr;
  size_t ws_bytes_ = size_t{32} << 20;
  std::mutex mu_;
  std::map<Key, cublasLtMatmulAlgo_t> algos_;
};

// y[m, n] = sum_k x[m, k] * w[n, k]  (+ y[m, n] when accumulate)
//   x: [M, K] bf16, rows ldx elements apart (ldx >= K)
//   w: [N, K] bf16, dense rows (a weight as stored in checkpoints)
//   y: [M, N] of type yt (DType::BF16 or DType::F32), rows ldy elements apart (ldy >= N)
// fp32 accumulation. Throws UnsupportedShape for another yt or non-positive sizes.
void gemm_xwt(Blas& blas, const bf16* x, int64_t M, int64_t K, int64_t ldx, const bf16* w, int64_t N, void* y,
              DType yt, int64_t ldy, bool accumulate, cudaStream_t stream);

}  // namespace hypic::cuda
