// Elementwise activations and softmax on fp32 buffers.
#pragma once
#include <cmath>
#include <cstdint>

namespace hypic::cpu {

inline float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }
inline float silu(float x) { return x / (1.0f + std::exp(-x)); }
// torch.nn.functional.softplus with beta 1 and threshold 20 (linear above the threshold).
inline float softplus(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }

// x[i] = silu(x[i]) for n elements.
void silu_inplace(float* x, int64_t n);
// gate[i] = silu(gate[i]) * up[i] for n elements (SwiGLU).
void swiglu_inplace(float* gate, const float* up, int64_t n);
// In-place softmax over each of `rows` rows of length n.
void softmax_rows(float* x, int64_t rows, int64_t n);

}  // namespace hypic::cpu
