#include <cmath>

#include "kernels/cuda/check.h"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/rope.h"

namespace hypic::cuda {
namespace {

constexpr int kMaxHalf = 128;  // rot_dim <= 256

// Per-dimension tables passed by value (kernel parameters live in constant memory).
struct Table {
  float a[kMaxHalf];  // inv_freq (apply) or cos (shift)
  float b[kMaxHalf];  // unused (apply) or sin (shift)
};

// inv_freq_d = 1 / theta^(2d / rot_dim), computed like the CPU reference (fp32 exponent, double pow).
Table inv_freq_table(int64_t rot_dim, double theta) {
  Table t{};
  for (int64_t d = 0; d < rot_dim / 2; ++d) {
    const float expo = static_cast<float>(2 * d) / static_cast<float>(rot_dim);
    t.a[d] = 1.0f / static_cast<float>(std::pow(theta, static_cast<double>(expo)));
  }
  return t;
}

// cos/sin of delta * inv_freq_d in double, rounded to float (the CPU reference's path).
Table shift_table(int64_t rot_dim, int64_t delta, double theta) {
  const Table f = inv_freq_table(rot_dim, theta);
  Table t{};
  for (int64_t d = 0; d < rot_dim / 2; ++d) {
    const double ang = static_cast<double>(delta) * f.a[d];
    t.a[d] = static_cast<float>(std::cos(ang));
    t.b[d] = static_cast<float>(std::sin(ang));
  }
  return t;
}

// One thread per (row, head, pair d < half).
__global__ void rope_apply_kernel(bf16* x, int64_t rows, int heads, int head_dim, int half,
                                  const int64_t* __restrict__ pos, Table f) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t n = rows * heads * half;
  if (i >= n) return;
  const int d = int(i % half);
  const int64_t rh = i / half, r = rh / heads;
  const float ang = static_cast<float>(pos[r]) * f.a[d];
  float sn, cs;
  sincosf(ang, &sn, &cs);
  bf16* v = x + rh * head_dim;
  const float a = __bfloat162float(v[d]), b = __bfloat162float(v[d + half]);
  v[d] = __float2bfloat16_rn(a * cs - b * sn);
  v[d + half] = __float2bfloat16_rn(b * cs + a * sn);
}

__global__ void rope_shift_kernel(bf16* x, int64_t rowheads, int head_dim, int half, Table t) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= rowheads * half) return;
  const int d = int(i % half);
  bf16* v = x + (i / half) * head_dim;
  const float a = __bfloat162float(v[d]), b = __bfloat162float(v[d + half]);
  v[d] = __float2bfloat16_rn(a * t.a[d] - b * t.b[d]);
  v[d + half] = __float2bfloat16_rn(b * t.a[d] + a * t.b[d]);
}

// One thread per (head, pair row d, column c): coalesced over c.
__global__ void rope_shift_state_kernel(float* s, int64_t heads, int dk, int dv, int half, Table t) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= heads * half * dv) return;
  const int c = int(i % dv);
  const int d = int((i / dv) % half);
  const int64_t h = i / (int64_t(dv) * half);
  float* base = s + h * dk * dv;
  const float a = base[int64_t(d) * dv + c], b = base[int64_t(d + half) * dv + c];
  base[int64_t(d) * dv + c] = a * t.a[d] - b * t.b[d];
  base[int64_t(d + half) * dv + c] = b * t.a[d] + a * t.b[d];
}

void check(int64_t head_dim, int64_t rot_dim, const char* op) {
  HYPIC_CUDA_REQUIRE(rot_dim > 0 && rot_dim % 2 == 0 && rot_dim <= head_dim && rot_dim / 2 <= kMaxHalf,
                     std::string(op) + ": rot_dim must be even, <= head_dim and <= 256");
}

}  // namespace

void rope_apply(bf16* x, int64_t rows, int64_t heads, int64_t head_dim, int64_t rot_dim, const int64_t* positions,
                double theta, cudaStream_t stream) {
  check(head_dim, rot_dim, "rope_apply");
  const int64_t n = rows * heads * (rot_dim / 2);
  if (n == 0) return;
  rope_apply_kernel<<<detail::blocks_for(n, 256), 256, 0, stream>>>(x, rows, int(heads), int(head_dim),
                                                                    int(rot_dim / 2), positions,
                                                                    inv_freq_table(rot_dim, theta));
  HYPIC_CUDA_LAUNCH_CHECK();
}

void rope_shift(bf16* x, int64_t rows, int64_t heads, int64_t head_dim, int64_t rot_dim, int64_t delta, double theta,
                cudaStream_t stream) {
  check(head_dim, rot_dim, "rope_shift");
  const int64_t n = rows * heads * (rot_dim / 2);
  if (delta == 0 || n == 0) return;
  rope_shift_kernel<<<detail::blocks_for(n, 256), 256, 0, stream>>>(x, rows * heads, int(head_dim), int(rot_dim / 2),
                                                                    shift_table(rot_dim, delta, theta));
  HYPIC_CUDA_LAUNCH_CHECK();
}

void rope_shift_state(float* state, int64_t heads, int64_t dk, int64_t dv, int64_t rot_dim, int64_t delta,
                      double theta, cudaStream_t stream) {
  check(dk, rot_dim, "rope_shift_state");
  const int64_t n = heads * (rot_dim / 2) * dv;
  if (delta == 0 || n == 0) return;
  rope_shift_state_kernel<<<detail::blocks_for(n, 256), 256, 0, stream>>>(state, heads, int(dk), int(dv),
                                                                          int(rot_dim / 2),
                                                                          shift_table(rot_dim, delta, theta));
  HYPIC_CUDA_LAUNCH_CHECK();
}

}  // namespace hypic::cuda
