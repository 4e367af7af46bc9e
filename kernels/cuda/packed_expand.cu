#include "kernels/cuda/packed_expand.h"

#include <algorithm>

#include "kernels/cuda/check.h"

namespace hypic::cuda {
namespace {

// Elements of the packed buffer start at any byte: a piece whose start is aligned to its element size is
// read with whole-element loads, another byte by byte (the same bytes, little-endian).
template <class T>
__device__ __forceinline__ T load(const unsigned char* p, bool aligned) {
  if (aligned) return *reinterpret_cast<const T*>(p);
  T v = 0;
#pragma unroll
  for (int b = 0; b < static_cast<int>(sizeof(T)); ++b) v |= static_cast<T>(p[b]) << (8 * b);
  return v;
}

// kernels/dtype.h's f32_to_bf16 on the bits: round to nearest even, NaN made quiet.
__device__ __forceinline__ uint16_t f32_bits_to_bf16(uint32_t u) {
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

// grid.y walks the pieces, grid.x * blockDim.x threads stride over a piece's elements.
__global__ void expand_kernel(const unsigned char* packed, const ExpandPiece* pieces, int64_t count) {
  for (int64_t k = blockIdx.y; k < count; k += gridDim.y) {
    const ExpandPiece p = pieces[k];
    const unsigned char* src = packed + p.src;
    const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
    const uint64_t first = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    switch (p.op) {
      case ExpandOp::Copy16:
      case ExpandOp::Bf16ToF32: {
        const bool aligned = (reinterpret_cast<uintptr_t>(src) & 1u) == 0;
        for (uint64_t i = first; i < p.n; i += stride) {
          const uint16_t h = load<uint16_t>(src + 2 * i, aligned);
          if (p.op == ExpandOp::Copy16) static_cast<uint16_t*>(p.dst)[i] = h;
          else static_cast<uint32_t*>(p.dst)[i] = static_cast<uint32_t>(h) << 16;
        }
        break;
      }
      case ExpandOp::Copy32:
      case ExpandOp::F32ToBf16: {
        const bool aligned = (reinterpret_cast<uintptr_t>(src) & 3u) == 0;
        for (uint64_t i = first; i < p.n; i += stride) {
          const uint32_t u = load<uint32_t>(src + 4 * i, aligned);
          if (p.op == ExpandOp::Copy32) static_cast<uint32_t*>(p.dst)[i] = u;
          else static_cast<uint16_t*>(p.dst)[i] = f32_bits_to_bf16(u);
        }
        break;
      }
      case ExpandOp::Zero32:
        for (uint64_t i = first; i < p.n; i += stride) static_cast<uint32_t*>(p.dst)[i] = 0;
        break;
    }
  }
}

template <class T>
__device__ __forceinline__ void store(unsigned char* p, T v, bool aligned) {
  if (aligned) {
    *reinterpret_cast<T*>(p) = v;
    return;
  }
#pragma unroll
  for (int b = 0; b < static_cast<int>(sizeof(T)); ++b) p[b] = static_cast<unsigned char>(v >> (8 * b));
}

__global__ void pack_kernel(unsigned char* packed, const PackPiece* pieces, int64_t count) {
  for (int64_t k = blockIdx.y; k < count; k += gridDim.y) {
    const PackPiece p = pieces[k];
    unsigned char* dst = packed + p.dst;
    const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
    const uint64_t first = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (p.op == ExpandOp::Copy32) {
      const bool aligned = (reinterpret_cast<uintptr_t>(dst) & 3u) == 0;
      for (uint64_t i = first; i < p.n; i += stride) store<uint32_t>(dst + 4 * i, static_cast<const uint32_t*>(p.src)[i], aligned);
    } else if (p.op == ExpandOp::Copy16 || p.op == ExpandOp::F32ToBf16) {
      const bool aligned = (reinterpret_cast<uintptr_t>(dst) & 1u) == 0;
      for (uint64_t i = first; i < p.n; i += stride) {
        const uint16_t h = p.op == ExpandOp::Copy16 ? static_cast<const uint16_t*>(p.src)[i]
                                                    : f32_bits_to_bf16(static_cast<const uint32_t*>(p.src)[i]);
        store<uint16_t>(dst + 2 * i, h, aligned);
      }
    }
  }
}

// One block per head: a strided max then a shared-memory reduction.
__global__ void head_max_kernel(const float* x, int64_t per_head, float* out) {
  __shared__ float part[256];
  const float* row = x + blockIdx.x * per_head;
  float m = 0.0f;
  for (int64_t i = threadIdx.x; i < per_head; i += blockDim.x) m = fmaxf(m, fabsf(row[i]));
  part[threadIdx.x] = m;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s /= 2) {
    if (threadIdx.x < s) part[threadIdx.x] = fmaxf(part[threadIdx.x], part[threadIdx.x + s]);
    __syncthreads();
  }
  if (threadIdx.x == 0) out[blockIdx.x] = part[0];
}

}  // namespace

void pack_arrays(char* packed, const PackPiece* pieces, int64_t count, uint64_t max_n, cudaStream_t stream) {
  if (count <= 0 || max_n == 0) return;
  constexpr int kThreads = 256;
  const uint64_t per_piece = std::min<uint64_t>((max_n + 4 * kThreads - 1) / (4 * kThreads), 1024);
  const dim3 grid(static_cast<unsigned>(per_piece), static_cast<unsigned>(std::min<int64_t>(count, 65535)));
  pack_kernel<<<grid, kThreads, 0, stream>>>(reinterpret_cast<unsigned char*>(packed), pieces, count);
  HYPIC_CUDA_CHECK(cudaGetLastError());
}

void head_max_abs(const float* x, int64_t heads, int64_t per_head, float* out, cudaStream_t stream) {
  if (heads <= 0) return;
  head_max_kernel<<<static_cast<unsigned>(heads), 256, 0, stream>>>(x, per_head, out);
  HYPIC_CUDA_CHECK(cudaGetLastError());
}

void expand_packed(const char* packed, const ExpandPiece* pieces, int64_t count, uint64_t max_n,
                   cudaStream_t stream) {
  if (count <= 0 || max_n == 0) return;
  constexpr int kThreads = 256;
  // Enough blocks per piece to stream its elements at memory speed, a few elements per thread.
  const uint64_t per_piece = std::min<uint64_t>((max_n + 4 * kThreads - 1) / (4 * kThreads), 1024);
  const dim3 grid(static_cast<unsigned>(per_piece), static_cast<unsigned>(std::min<int64_t>(count, 65535)));
  expand_kernel<<<grid, kThreads, 0, stream>>>(reinterpret_cast<const unsigned char*>(packed), pieces, count);
  HYPIC_CUDA_CHECK(cudaGetLastError());
}

}  // namespace hypic::cuda
