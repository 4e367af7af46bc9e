// Elementwise helpers of the caching engine on the CUDA backend (runtime/cuda/cuda_backend.h) for fp32 recurrent
// states and transfer operators: identity operators to start a span, and a + alpha b (the naive-sum
// ablation S + S_body). Raw device pointers.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/types.h"

namespace hypic::cuda {

// T[h] = I for every h < heads; T: [heads, d, d] fp32.
void identity_operators(float* T, int64_t heads, int64_t d, cudaStream_t stream);

// out[i] = a[i] + alpha * b[i] for i < n (fp32); out may alias a or b.
void add_scaled(float* out, const float* a, float alpha, const float* b, int64_t n, cudaStream_t stream);

// One step of a state chain (a stitch lane's linear layer: its seams and cached bodies in order). Per head h
// (pointers are to head 0; head h is at h * dk * dk for T and h * dk * dv for the rest):
//   before <- S;  S <- T S + B  (T null: identity; B null: zero; replace: S <- B);  after <- S
// (null pointers skipped). A step with n > 0 is a span of n rows instead (T, B and replace unused): the
// gated delta rule of delta_rule.h token by token on S, with its outputs,
//   S_t = exp(g_t) (I - beta_t k_t k_t^T) S_{t-1} + beta_t k_t v_t^T,   o_t = S_t^T q_t,
// reading q, k [n, Hk, dk] and v [n, H, dv] bf16, g, beta [n, H] fp32 (rows packed, pointers to the span's
// first row; q and k l2-normalised, q scaled) and writing o [n, H, dv] bf16. Value head h reads q/k head
// h / (H / Hk). For the few rows of a stitch's seams this costs far less than the span's transfer
// operator and zero-start state, which the product form needs.
struct StateStep {
  const float* T;
  const float* B;
  float* before;
  float* after;
  int replace;
  const bf16* q = nullptr;
  const bf16* k = nullptr;
  const bf16* v = nullptr;
  const float* g = nullptr;
  const float* beta = nullptr;
  bf16* o = nullptr;
  int n = 0;
};

// Runs `n` steps in order over S [H, dk, dv] fp32 (in/out) in ONE launch: every (head, 32-column tile)
// block keeps its tile of S in shared memory across the steps (columns of S evolve independently).
// steps: [n] StateStep on the device. dk <= 128. A step's buffers must not alias S or each other.
// Hk: the q/k heads of row steps (0: H).
void state_chain(int64_t H, int64_t dk, int64_t dv, const StateStep* steps, int64_t n, float* S, cudaStream_t stream,
                 int64_t Hk = 0);

// For i < n: copy sizes[i] bytes (or `bytes` when sizes is null; `bytes` >= every size) from src[i] to dst[i]
// (device arrays of device pointers and sizes; a null dst is skipped).
void copy_batched(const void* const* src, void* const* dst, const int64_t* sizes, int64_t n, size_t bytes,
                  cudaStream_t stream);

}  // namespace hypic::cuda
