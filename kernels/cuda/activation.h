// Elementwise activations on bf16 (fp32 math).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/types.h"

namespace hypic::cuda {

// x[i] = silu(x[i]); x: [n] bf16.
void silu_inplace(bf16* x, int64_t n, cudaStream_t stream);

// SwiGLU over rows: out[r, i] = silu(gate[r, i]) * up[r, i], i < I.
//   gate: rows ld_gate apart, up: rows ld_up apart, out: rows ld_out apart (all bf16).
// A fused gate_up projection [R, 2I] is gate = buf, up = buf + I, ld_gate = ld_up = 2I.
// out may alias gate when ld_out == ld_gate.
void swiglu(const bf16* gate, int64_t ld_gate, const bf16* up, int64_t ld_up, bf16* out, int64_t ld_out, int64_t rows,
            int64_t I, cudaStream_t stream);

// Output gate of gated attention: x[i] *= sigmoid(gate[i]); rows of x and gate are ld_x / ld_gate apart.
void sigmoid_mul(bf16* x, int64_t ld_x, const bf16* gate, int64_t ld_gate, int64_t rows, int64_t n,
                 cudaStream_t stream);

}  // namespace hypic::cuda
