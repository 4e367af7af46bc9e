// Elementwise helpers of the caching engine on the CUDA backend (runtime/cuda/cuda_backend.h) for fp32 recurrent
// states and transfer operators: identity operators to start a span, and a + alpha b (the naive-sum
// ablation S + S_body). Raw device pointers.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace hypic::cuda {

// T[h] = I for every h < heads; T: [heads, d, d] fp32.
void identity_operators(float* T, int64_t heads, int64_t d, cudaStream_t stream);

// out[i] = a[i] + alpha * b[i] for i < n (fp32); out may alias a or b.
void add_scaled(float* out, const float* a, float alpha, const float* b, int64_t n, cudaStream_t stream);

}  // namespace hypic::cuda
