// Expanding a packed byte buffer on the device into typed arrays, with element conversions (the pieces
// of kernels/packed_expand.h, whose CPU function is the reference: results are bit for bit the same).
// Used to promote an encoded cache record: the record is copied to the device as it is and expanded here.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/packed_expand.h"

namespace hypic::cuda {

// Applies pieces[0, count) (a device array; every dst a device array) to `packed` (device memory, any
// alignment). max_n: the largest piece's element count (host value, sizes the grid). Pieces must not
// write overlapping elements. Queued on `stream`.
void expand_packed(const char* packed, const ExpandPiece* pieces, int64_t count, uint64_t max_n,
                   cudaStream_t stream);

// The reverse (cpu::pack_arrays): pieces[0, count) (a device array; every src a device array) written
// into `packed` (device memory, any alignment). Bytes no piece writes are left as they are.
void pack_arrays(char* packed, const PackPiece* pieces, int64_t count, uint64_t max_n, cudaStream_t stream);

// out[h] = max_i |x[h * per_head + i]| for h < heads (x, out: device fp32). Queued on `stream`.
void head_max_abs(const float* x, int64_t heads, int64_t per_head, float* out, cudaStream_t stream);

}  // namespace hypic::cuda
