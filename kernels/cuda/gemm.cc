#include "kernels/cuda/gemm.h"

#include "kernels/cuda/check.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace hypic::cuda {

Blas::Blas() {
  HYPIC_CUBLAS_CHECK(cublasCreate(&blas_));
  HYPIC_CUBLAS_CHECK(cublasLtCreate(&lt_));
  HYPIC_CUDA_CHECK(cudaMalloc(&ws_, ws_bytes_));
  HYPIC_CUBLAS_CHECK(cublasSetWorkspace(blas_, ws_, ws_bytes_));
}

Blas::~Blas() {
  if (lt_) cublasLtDestroy(lt_);
  if (blas_) cublasDestroy(blas_);
  if (ws_) cudaFree(ws_);
}

bool Blas::cached_algo(const Key& k, cublasLtMatmulAlgo_t* algo) {
  std::lock_guard<std::mutex> g(mu_);
  auto it = algos_.find(k);
  if (it == algos_.end()) return false;
  *algo = it->second;
  return true;
}

void Blas::store_algo(const Key& k, const cublasLtMatmulAlgo_t& algo) {
  std::lock_guard<std::mutex> g(mu_);
  algos_[k] = algo;
}

namespace {

// RAII for the cuBLASLt descriptors of one call.
struct LtDescs {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  ~LtDescs() {
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (c) cublasLtMatrixLayoutDestroy(c);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

// HYPIC_BLAS_TRACE=1: every heuristic query and its host time on stderr.
bool blas_trace() {
  static const bool on = [] {
    const char* e = std::getenv("HYPIC_BLAS_TRACE");
    return e && *e && std::string(e) != "0";
  }();
  return on;
}

// The row count the algorithm is chosen for. The heuristic costs 0.2-0.3 ms of host time per new problem
// on the H200, and a serving engine meets a new row count on nearly every request (a stitch's seams and
// question, a chunk's tail): above 16 rows one algorithm serves every M up to the next power of two.
int64_t algo_rows(int64_t M) {
  if (M <= 16) return M;
  int64_t b = 32;
  while (b < M) b *= 2;
  return b;
}

}  // namespace

void gemm_xwt(Blas& blas, const bf16* x, int64_t M, int64_t K, int64_t ldx, const bf16* w, int64_t N, void* y,
              DType yt, int64_t ldy, bool accumulate, cudaStream_t stream) {
  HYPIC_CUDA_REQUIRE(M > 0 && N > 0 && K > 0, "gemm_xwt: empty problem");
  HYPIC_CUDA_REQUIRE(ldx >= K && ldy >= N, "gemm_xwt: leading dimension smaller than the row");
  HYPIC_CUDA_REQUIRE(yt == DType::BF16 || yt == DType::F32, "gemm_xwt: output must be BF16 or F32");
  const cudaDataType_t ct = yt == DType::BF16 ? CUDA_R_16BF : CUDA_R_32F;
  // Row-major y[M, N] = x W^T is column-major y^T[N, M] = W[N, K] x^T: A = W (stored K x N, transposed),
  // B = x (stored K x M), C = y (stored N x M).
  LtDescs d;
  HYPIC_CUBLAS_CHECK(cublasLtMatmulDescCreate(&d.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  HYPIC_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
  HYPIC_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
  HYPIC_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&d.a, CUDA_R_16BF, K, N, K));
  HYPIC_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&d.b, CUDA_R_16BF, K, M, ldx));
  HYPIC_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&d.c, ct, N, M, ldy));

  // The heuristic assumes 256-byte aligned operands unless told otherwise: key the cache on alignment too.
  auto align_of = [](const void* p) {
    const auto a = reinterpret_cast<uintptr_t>(p);
    uint32_t al = 256;
    while (al > 2 && (a % al) != 0) al /= 2;
    return al;
  };
  const uint32_t al_a = align_of(w), al_b = align_of(x), al_c = align_of(y);
  const int64_t al_key = (int64_t{al_a} << 20) | (int64_t{al_b} << 10) | al_c;
  // Queries the heuristic for `rows` rows (the layouts of B and C for that many columns).
  auto query = [&](int64_t rows) {
    const auto t0 = std::chrono::steady_clock::now();
    LtDescs q;
    HYPIC_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&q.b, CUDA_R_16BF, K, rows, ldx));
    HYPIC_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&q.c, ct, N, rows, ldy));
    HYPIC_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&q.pref));
    size_t ws = blas.workspace_bytes();
    HYPIC_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(q.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                                            sizeof(ws)));
    HYPIC_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(q.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al_a,
                                                            sizeof(al_a)));
    HYPIC_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(q.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al_b,
                                                            sizeof(al_b)));
    HYPIC_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(q.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al_c,
                                                            sizeof(al_c)));
    HYPIC_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(q.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al_c,
                                                            sizeof(al_c)));
    cublasLtMatmulHeuristicResult_t res{};
    int found = 0;
    HYPIC_CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(blas.lt(), d.op, d.a, q.b, q.c, q.c, q.pref, 1, &res, &found));
    HYPIC_CUDA_REQUIRE(found > 0, "gemm_xwt: cuBLASLt has no algorithm for this problem");
    if (blas_trace())
      std::fprintf(stderr, "[blas] heuristic M=%lld (asked for %lld) N=%lld K=%lld: %.1f us\n",
                   static_cast<long long>(M), static_cast<long long>(rows), static_cast<long long>(N),
                   static_cast<long long>(K),
                   std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
    return res.algo;
  };
  const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
  auto run = [&](const cublasLtMatmulAlgo_t& algo) {
    return cublasLtMatmul(blas.lt(), d.op, &alpha, w, d.a, x, d.b, &beta, y, d.c, y, d.c, &algo, blas.workspace(),
                          blas.workspace_bytes(), stream);
  };
  // An exact-M entry exists only where the bucket's algorithm was refused for this M.
  const int64_t rows = algo_rows(M);
  const Blas::Key exact{M, N, K, ldx, ldy, al_key, static_cast<int>(yt) | 256, accumulate};
  const Blas::Key bucket{rows, N, K, ldx, ldy, al_key, static_cast<int>(yt), accumulate};
  cublasLtMatmulAlgo_t algo;
  if (blas.cached_algo(exact, &algo)) {
    HYPIC_CUBLAS_CHECK(run(algo));
    return;
  }
  if (!blas.cached_algo(bucket, &algo)) {
    algo = query(rows);
    blas.store_algo(bucket, algo);
  }
  if (rows == M) {
    HYPIC_CUBLAS_CHECK(run(algo));
    return;
  }
  if (run(algo) == CUBLAS_STATUS_SUCCESS) return;
  algo = query(M);
  blas.store_algo(exact, algo);
  HYPIC_CUBLAS_CHECK(run(algo));
}

}  // namespace hypic::cuda
