#include "kernels/cuda/activation.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/pdl_launch.cuh"

namespace hypic::cuda {
namespace {

__global__ void silu_kernel(bf16* x, int64_t n) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) x[i] = __float2bfloat16_rn(detail::silu_f(__bfloat162float(x[i])));
}

__global__ void swiglu_kernel(const bf16* gate, int64_t lg, const bf16* __restrict__ up, int64_t lu, bf16* out,
                              int64_t lo, int64_t rows, int64_t I) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= rows * I) return;
  const int64_t r = i / I, c = i % I;
  const float g = __bfloat162float(gate[r * lg + c]), u = __bfloat162float(up[r * lu + c]);
  out[r * lo + c] = __float2bfloat16_rn(detail::silu_f(g) * u);
}

__global__ void sigmoid_mul_kernel(bf16* x, int64_t lx, const bf16* __restrict__ gate, int64_t lg, int64_t rows,
                                   int64_t n) {
  detail::pdl_trigger();  // a programmatically launched successor (cuda::gemv) may start
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= rows * n) return;
  const int64_t r = i / n, c = i % n;
  x[r * lx + c] = __float2bfloat16_rn(__bfloat162float(x[r * lx + c]) * detail::sigmoid_f(__bfloat162float(gate[r * lg + c])));
}

// Eight consecutive columns a thread (16-byte loads and stores; the same math per element): the scalar form
// spent most of its time on the 64-bit index division and 2-byte accesses. n, lx, lg % 8 == 0, 16-byte aligned.
__global__ void sigmoid_mul8_kernel(bf16* x, int64_t lx, const bf16* __restrict__ gate, int64_t lg, int64_t rows,
                                    int64_t n8) {
  detail::pdl_wait();
  detail::pdl_trigger();
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= rows * n8) return;
  const int64_t r = i / n8, c = (i % n8) * 8;
  uint4* px = reinterpret_cast<uint4*>(x + r * lx + c);
  *px = detail::sigmoid_mul8(*px, *reinterpret_cast<const uint4*>(gate + r * lg + c));
}

// swiglu_kernel's math, eight consecutive columns a thread (16-byte accesses; as sigmoid_mul8_kernel).
// I, lg, lu, lo % 8 == 0, 16-byte aligned; out may alias gate (each thread reads its columns before writing).
__global__ void swiglu8_kernel(const bf16* gate, int64_t lg, const bf16* __restrict__ up, int64_t lu, bf16* out,
                               int64_t lo, int64_t rows, int64_t I8) {
  detail::pdl_wait();
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= rows * I8) return;
  const int64_t r = i / I8, c = (i % I8) * 8;
  const uint4 gu = *reinterpret_cast<const uint4*>(gate + r * lg + c);
  const uint4 uu = *reinterpret_cast<const uint4*>(up + r * lu + c);
  const __nv_bfloat16* gv = reinterpret_cast<const __nv_bfloat16*>(&gu);
  const __nv_bfloat16* uv = reinterpret_cast<const __nv_bfloat16*>(&uu);
  uint4 o;
  __nv_bfloat16* ov = reinterpret_cast<__nv_bfloat16*>(&o);
#pragma unroll
  for (int j = 0; j < 8; ++j)
    ov[j] = __float2bfloat16_rn(detail::silu_f(__bfloat162float(gv[j])) * __bfloat162float(uv[j]));
  *reinterpret_cast<uint4*>(out + r * lo + c) = o;
}

}  // namespace

void silu_inplace(bf16* x, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  silu_kernel<<<detail::blocks_for(n, 256), 256, 0, stream>>>(x, n);
  HYPIC_CUDA_LAUNCH_CHECK();
}

void swiglu(const bf16* gate, int64_t ld_gate, const bf16* up, int64_t ld_up, bf16* out, int64_t ld_out, int64_t rows,
            int64_t I, cudaStream_t stream) {
  HYPIC_CUDA_REQUIRE(ld_gate >= I && ld_up >= I && ld_out >= I, "swiglu: row stride smaller than I");
  if (rows <= 0 || I <= 0) return;
  const bool vec = I % 8 == 0 && ld_gate % 8 == 0 && ld_up % 8 == 0 && ld_out % 8 == 0 &&
                   ((reinterpret_cast<uintptr_t>(gate) | reinterpret_cast<uintptr_t>(up) |
                     reinterpret_cast<uintptr_t>(out)) & 15) == 0;
  if (vec)
    detail::launch_pdl(detail::pdl_chain_enabled(), swiglu8_kernel, dim3(detail::blocks_for(rows * (I / 8), 256)),
                       dim3(256), 0, stream, gate, ld_gate, up, ld_up, out, ld_out, rows, I / 8);
  else
    swiglu_kernel<<<detail::blocks_for(rows * I, 256), 256, 0, stream>>>(gate, ld_gate, up, ld_up, out, ld_out, rows, I);
  HYPIC_CUDA_LAUNCH_CHECK();
}

void sigmoid_mul(bf16* x, int64_t ld_x, const bf16* gate, int64_t ld_gate, int64_t rows, int64_t n,
                 cudaStream_t stream) {
  HYPIC_CUDA_REQUIRE(ld_x >= n && ld_gate >= n, "sigmoid_mul: row stride smaller than n");
  if (rows <= 0 || n <= 0) return;
  const bool vec = n % 8 == 0 && ld_x % 8 == 0 && ld_gate % 8 == 0 && (reinterpret_cast<uintptr_t>(x) & 15) == 0 &&
                   (reinterpret_cast<uintptr_t>(gate) & 15) == 0;
  if (vec)
    detail::launch_pdl(detail::pdl_chain_enabled(), sigmoid_mul8_kernel, dim3(detail::blocks_for(rows * (n / 8), 256)),
                       dim3(256), 0, stream, x, ld_x, gate, ld_gate, rows, n / 8);
  else
    sigmoid_mul_kernel<<<detail::blocks_for(rows * n, 256), 256, 0, stream>>>(x, ld_x, gate, ld_gate, rows, n);
  HYPIC_CUDA_LAUNCH_CHECK();
}

}  // namespace hypic::cuda
