// Composition of cached segment states on device (DESIGN §1.2), batched over independent items
// (layers x segments x sequences): out_b = T_b S0_b + Sbody_b, and operator folding out_b = T2_b T1_b.
// Shapes per item follow kernels/transfer_operator.h (fp32):
//   Scalar: T [H];  Diagonal: T [H, dk];  Dense: T [H, dk, dk];  states [H, dk, dv].
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/transfer_operator.h"

namespace hypic::cuda {

using cpu::TransferKind;
using cpu::TransferShape;

// For b < batch: out[b] = T[b] S0[b] + S_body[b]. T, S0, S_body, out are DEVICE arrays of `batch` device
// pointers (items may live anywhere in the segment store). S_body[b] may be null (out = T S0).
// out[b] must not alias T[b] or S0[b] for the Dense kind; it may alias S_body[b].
void transfer_apply_batched(const TransferShape& s, int64_t batch, const float* const* T, const float* const* S0,
                            const float* const* S_body, float* const* out, cudaStream_t stream);

// One Dense item with device pointers passed directly: out = T S0 + S_body (S_body may be null). out must
// not alias T or S0; it may alias S_body.
void transfer_apply(const TransferShape& s, const float* T, const float* S0, const float* S_body, float* out,
                    cudaStream_t stream);

// For b < batch: out[b] = T2[b] T1[b] (the operator of segment 1 followed by segment 2); DEVICE pointer
// arrays as above; out[b] must not alias T2[b] or T1[b] for the Dense kind.
void transfer_compose_batched(const TransferShape& s, int64_t batch, const float* const* T2, const float* const* T1,
                              float* const* out, cudaStream_t stream);

}  // namespace hypic::cuda
