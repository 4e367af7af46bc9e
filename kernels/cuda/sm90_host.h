// Host side of the Hopper (sm_90a) kernels: the tensor maps their bulk copies (TMA) read through, and
// whether the current device runs sm_90a code at all.
#pragma once
#include <cuda.h>

#include <cstdint>

#include "kernels/cuda/types.h"

namespace hypic::cuda {

// A rows x width bf16 matrix (row stride = width elements, base and stride 16-byte aligned) read in boxes of
// box_rows rows x 64 columns (128 bytes), each box written to shared memory with the 128-byte swizzle that
// wgmma's SW128 descriptors read. `what` names the caller in the error thrown when encoding fails.
CUtensorMap tensor_map_sw128(const bf16* base, int64_t width, int64_t rows, uint32_t box_rows, const char* what);
// The same with rows `row_stride` elements apart (row_stride >= width, a multiple of 8).
CUtensorMap tensor_map_sw128(const bf16* base, int64_t width, int64_t rows, int64_t row_stride, uint32_t box_rows,
                             const char* what);

// True where the current device has compute capability 9.0 exactly (sm_90a code runs nowhere else).
bool current_device_is_sm90();

}  // namespace hypic::cuda
