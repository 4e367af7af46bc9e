// Matrix-vector products of one activation row against bf16 weights: the decode step (one token) of the
// CUDA model. One launch computes up to kGemvMaxTargets products that read the same input row, the input
// optionally RMS-normed from the fp32 residual stream inside the kernel, with the epilogues a decode layer
// needs. At one row a product is a pass over its weights; what costs is the number of launches between
// them and how many loads are in flight, so neighbouring products and their small element-wise steps
// share a launch.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/types.h"
#include "kernels/dtype.h"

namespace hypic::cuda {

constexpr int kGemvMaxTargets = 4;
constexpr int64_t kGemvMaxK = 8192;  // the input row lives in shared memory

enum class GemvEpilogue : int32_t {
  Store,        // y[n] = acc                                   (y fp32 or bf16)
  Add,          // y[n] += acc                                  (y fp32: the residual stream)
  SwiGlu,       // y[n] = bf16(silu(bf16(g_n)) * bf16(u_n)),  g_n = W[n] . x,  u_n = W[rows + n] . x   (y bf16)
  MoeResidual,  // y[n] += routed[n] + (gate ? sigmoid(*gate) : 1) * bf16(acc)   (y fp32, routed bf16)
  GdnGates,     // rows = 2H (the b then the a projection of a Gated DeltaNet layer), as cuda::gdn_gates:
                // y[j] = beta_j = sigmoid(acc_j),  g_out[j] = -exp(a_log[j]) * softplus(acc_{H+j} + dt_bias[j])
};

// One product: W [rows, K] row-major bf16 (SwiGlu: [2 * rows, K], the gate rows then the up rows).
struct GemvTarget {
  const bf16* w = nullptr;
  int64_t rows = 0;  // outputs
  void* y = nullptr;
  DType yt = DType::F32;  // F32 or BF16 for Store; F32 for Add and MoeResidual; BF16 for SwiGlu
  GemvEpilogue epilogue = GemvEpilogue::Store;
  const bf16* routed = nullptr;  // MoeResidual: [rows] the routed experts' output
  const float* gate = nullptr;   // MoeResidual: one logit on the device, or null for an ungated add
  const float* a_log = nullptr;  // GdnGates: [H] each
  const float* dt_bias = nullptr;
  float* g_out = nullptr;        // GdnGates: [H] fp32 (y holds beta, [H] fp32)
};

// The input row: either x, or the RMS norm of the fp32 row h computed in the kernel,
//   x[i] = bf16(h[i] * rsqrt(mean(h^2) + eps) * (zero_centred ? 1 + norm_w[i] : norm_w[i])),
// bit-identical to cuda::rmsnorm of one row of K in [1024, 4096]; x_out (optional) receives that row for
// the kernels that follow. Or (gated_o given) the gated norm of a Gated DeltaNet layer's output by heads of
// head_dim, bit-identical to cuda::rmsnorm_gated_silu(gated_o, gated_z, x, K / head_dim, head_dim, norm_w, eps):
//   x[i] = bf16(norm_w[i % head_dim] * (o[i] * rsqrt(mean over i's head of o^2) + eps)) * silu(z[i]));
// head_dim a power of two in [8, 256], K % 256 == 0, o and z 16-byte aligned, norm_w [head_dim] too.
// Or (sig_x given) an attention output under its sigmoid gate, bit-identical to cuda::sigmoid_mul(sig_x,
// head_dim, sig_gate, gate_ld, K / head_dim, head_dim) then the product:
//   x[i] = bf16(sig_x[i] * sigmoid(sig_gate[(i / head_dim) * gate_ld + i % head_dim]));
// head_dim and gate_ld multiples of 8, K % head_dim == 0, sig_x and sig_gate 16-byte aligned.
struct GemvInput {
  const bf16* x = nullptr;
  const float* h = nullptr;
  const float* norm_w = nullptr;
  float eps = 1e-6f;
  bool zero_centred = false;
  bf16* x_out = nullptr;
  const bf16* gated_o = nullptr;
  const bf16* gated_z = nullptr;
  int64_t head_dim = 0;
  const bf16* sig_x = nullptr;
  const bf16* sig_gate = nullptr;
  int64_t gate_ld = 0;
};

// Whether gemv takes this gated input (the shapes and alignments above).
bool gemv_gated_input_fits(int64_t K, int64_t head_dim, const void* o, const void* z, const float* norm_w);
// Whether gemv takes this sigmoid-gated input (the shapes and alignments above).
bool gemv_sigmoid_input_fits(int64_t K, int64_t head_dim, int64_t gate_ld, const void* x, const void* gate);

// y_j = epilogue_j(W_j x) for every target. K % 8 == 0, K <= kGemvMaxK (normed input: 1024 <= K <= 4096),
// x and every W 16-byte aligned, 1..kGemvMaxTargets targets (a pointer and a count: the CUDA sources are
// C++17). No output may alias x, h or another output (an Add target may be the residual stream only when
// the input is not normed from it).
// rows_per_warp: 1, 2 or 4 output rows per warp (2 or 4 with a SwiGlu target); 0 picks by shape (the
// bench, hypic_bench_kernels --only gemv, times each).
void gemv(const GemvInput& in, int64_t K, const GemvTarget* targets, int n_targets, cudaStream_t stream,
          int rows_per_warp = 0);

}  // namespace hypic::cuda
