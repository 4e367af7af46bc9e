// Element types shared by the CUDA kernels: activations and weights are bf16, states fp32.
#pragma once
#include <cuda_bf16.h>

namespace hypic::cuda {

using bf16 = __nv_bfloat16;

}  // namespace hypic::cuda
