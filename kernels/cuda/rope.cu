#include <algorithm>
#include <cmath>

#include "kernels/cuda/check.h"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/pdl_launch.cuh"
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

// One warp per (row, head) of the queries then the keys: the norm as rmsnorm_kernel sums it (lane-strided,
// then the butterfly), the rounded row kept in shared memory, then the rotation as rope_apply_kernel does.
constexpr int kQkWarps = 4, kQkMaxDim = 1023;

__global__ void __launch_bounds__(kQkWarps * 32)
    qk_norm_rope_kernel(const bf16* q_src, int64_t q_stride, bf16* q, bf16* k, int64_t T, int H, int Hkv, int hd,
                        const float* __restrict__ q_norm, const float* __restrict__ k_norm, float eps, bool zc,
                        int half, const int64_t* __restrict__ pos, Table f, const bf16* __restrict__ v_new,
                        const KvSlot* __restrict__ slots, bool early, bool trigger_first, bool pre) {
  if (trigger_first) detail::pdl_trigger();
  __shared__ float buf[kQkWarps][kQkMaxDim + 1];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t item = int64_t(blockIdx.x) * kQkWarps + warp, per_row = H + Hkv;
  const bool has_item = item < T * per_row;
  const int64_t t = has_item ? item / per_row : 0;
  const int j = int(item % per_row);
  const bool is_q = j < H;
  // pre (with the append: a batched decode step, whose positions and slots are its inputs, copied before its first
  // kernel): the norm's weights, the slot, the position and the rotation's angles before the wait, round trips off
  // the chain that starts when the products end. Elsewhere a kernel before may write the positions.
  constexpr int kPre = 8;  // the norm weights a lane holds (hd <= 256); the rest are read where used
  const float* w = is_q ? q_norm : k_norm;
  float wv[kPre];
  KvSlot sl{};
  float p = 0.0f, sn0 = 0.0f, cs0 = 0.0f;  // sn0, cs0: the lane's first pair's (half <= 32 in every model)
  const auto angles = [&] {
#pragma unroll
    for (int m = 0; m < kPre; ++m) {
      const int i = lane + 32 * m;
      wv[m] = has_item && i < hd ? (zc ? 1.0f + w[i] : w[i]) : 0.0f;
    }
    if (has_item && !is_q && slots) sl = slots[t];
    p = has_item ? static_cast<float>(pos[t]) : 0.0f;
    if (has_item && lane < half) sincosf(p * f.a[lane], &sn0, &cs0);
  };
  if (pre) angles();
  detail::pdl_wait();  // programmatic launch in a decode step: the product before writes the rows
  if (early && !trigger_first) detail::pdl_trigger();
  if (!pre) angles();
  if (!has_item) return;
  const bf16* src = is_q ? q_src + (t * H + j) * q_stride : k + (t * Hkv + (j - H)) * hd;
  bf16* dst = is_q ? q + (t * H + j) * hd : k + (t * Hkv + (j - H)) * hd;
  if (!is_q && slots) {  // into sequence t's cache row, with its value row and position (kv_append_batched)
    const int64_t r = int64_t(sl.rows) - 1, at = (r * Hkv + (j - H)) * hd;
    if (r < 0 || r >= sl.capacity) return;
    dst = sl.k + at;
    const bf16* vs = v_new + (t * Hkv + (j - H)) * hd;
    for (int i = lane; i < hd; i += 32) sl.v[at + i] = vs[i];
    if (j == H && lane == 0) sl.pos[r] = pos[t];
  }
  float ss = 0;
  for (int i = lane; i < hd; i += 32) {
    const float v = __bfloat162float(src[i]);
    ss += v * v;
  }
  const float inv = rsqrtf(detail::warp_sum(ss) / hd + eps);
  float* b = buf[warp];
#pragma unroll
  for (int m = 0; m < kPre; ++m) {
    const int i = lane + 32 * m;
    if (i < hd) b[i] = detail::round_bf16(__bfloat162float(src[i]) * inv * wv[m]);
  }
  for (int i = lane + 32 * kPre; i < hd; i += 32)
    b[i] = detail::round_bf16(__bfloat162float(src[i]) * inv * (zc ? 1.0f + w[i] : w[i]));
  __syncwarp();
  for (int d = lane; d < half; d += 32) {
    float sn = sn0, cs = cs0;
    if (d != lane) sincosf(p * f.a[d], &sn, &cs);
    const float a = b[d], c = b[d + half];
    dst[d] = __float2bfloat16_rn(a * cs - c * sn);
    dst[d + half] = __float2bfloat16_rn(c * cs + a * sn);
  }
  for (int i = 2 * half + lane; i < hd; i += 32) dst[i] = __float2bfloat16_rn(b[i]);
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

// One block per destination row: find its range, copy the value row, rotate-copy the key row. Where the row
// is 16-byte aligned and no 8-element group straddles the rotated halves (vec, checked on the host for the
// shapes and here for each range's pointers), a thread moves 8 elements a load: the stitch's K/V appends are
// a stream of ~35 MB a layer, which element-wide accesses held to ~2 TB/s.
__global__ void kv_append_ranges_kernel(const KvRange* __restrict__ ranges, const float* __restrict__ tables,
                                        int n_ranges, int64_t first_row, bf16* K, bf16* V, int64_t* pos, int heads,
                                        int head_dim, int half, bool vec) {
  detail::pdl_wait();
  const int64_t r = first_row + blockIdx.x;
  int lo = 0, hi = n_ranges - 1;  // the last range starting at or before r
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (ranges[mid].row <= r) lo = mid;
    else hi = mid - 1;
  }
  const KvRange rg = ranges[lo];
  const int64_t j = r - rg.row;
  const int64_t w = int64_t(heads) * head_dim;
  const bf16* ks = rg.k + j * w;
  const bf16* vs = rg.v + j * w;
  bf16* kd = K + r * w;
  bf16* vd = V + r * w;
  const float* cs = tables + int64_t(lo) * 2 * half;
  const float* sn = cs + half;
  if (threadIdx.x == 0) pos[r] = rg.pos0 + j;
  if (vec && ((reinterpret_cast<uintptr_t>(rg.k) | reinterpret_cast<uintptr_t>(rg.v)) & 15) == 0) {
    for (int64_t e = 8 * int64_t(threadIdx.x); e < w; e += 8 * int64_t(blockDim.x)) {
      *reinterpret_cast<uint4*>(vd + e) = *reinterpret_cast<const uint4*>(vs + e);
      const int d = int(e % head_dim);
      if (rg.rotate == 0 || d >= 2 * half) {
        *reinterpret_cast<uint4*>(kd + e) = *reinterpret_cast<const uint4*>(ks + e);
        continue;
      }
      // This group and its partner in the other half, a = first-half element, b = second-half element.
      const bool first = d < half;
      const int p = first ? d : d - half;
      uint4 mine = *reinterpret_cast<const uint4*>(ks + e);
      const uint4 other = *reinterpret_cast<const uint4*>(ks + (first ? e + half : e - half));
      bf16* m = reinterpret_cast<bf16*>(&mine);
      const bf16* o = reinterpret_cast<const bf16*>(&other);
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        const float x = __bfloat162float(m[i]), y = __bfloat162float(o[i]);
        // first half: a cos - b sin (x = a, y = b); second half: b cos + a sin (x = b, y = a)
        m[i] = __float2bfloat16_rn(first ? x * cs[p + i] - y * sn[p + i] : x * cs[p + i] + y * sn[p + i]);
      }
      *reinterpret_cast<uint4*>(kd + e) = mine;
    }
    return;
  }
  for (int64_t e = threadIdx.x; e < w; e += blockDim.x) {
    vd[e] = vs[e];
    const int d = int(e % head_dim);
    if (rg.rotate == 0 || d >= 2 * half) {
      kd[e] = ks[e];
    } else if (d < half) {
      const float a = __bfloat162float(ks[e]), b = __bfloat162float(ks[e + half]);
      kd[e] = __float2bfloat16_rn(a * cs[d] - b * sn[d]);
    } else {
      const int p = d - half;
      const float a = __bfloat162float(ks[e - half]), b = __bfloat162float(ks[e]);
      kd[e] = __float2bfloat16_rn(b * cs[p] + a * sn[p]);
    }
  }
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

void qk_norm_rope(const bf16* q_src, int64_t q_stride, bf16* q, bf16* k, int64_t T, int64_t H, int64_t Hkv,
                  int64_t head_dim, const float* q_norm, const float* k_norm, float eps, bool zero_centred,
                  int64_t rot_dim, const int64_t* positions, double theta, cudaStream_t stream,
                  const QkAppend* append) {
  check(head_dim, rot_dim, "qk_norm_rope");
  HYPIC_CUDA_REQUIRE(head_dim <= kQkMaxDim && q_stride >= head_dim && q_norm && k_norm && H > 0 && Hkv > 0 && T >= 0,
                     "qk_norm_rope: head_dim must be below 1024, the norms given");
  HYPIC_CUDA_REQUIRE(!append || (append->v_new && append->slots), "qk_norm_rope: an append needs values and slots");
  const int64_t items = T * (H + Hkv);
  if (items == 0) return;
  const bool pdl = detail::pdl_chain_enabled();
  const bool early = detail::pdl_trigger_early(detail::blocks_for(items, kQkWarps));
  // With the append (a batched decode step), the attention that follows may start while the products before
  // this kernel still run: it reads only older cache rows before its own wait, and those stream under the
  // products' tail. HYPIC_CUDA_QK_TRIGGER_FIRST=0: after this kernel's wait (A/B runs).
  const bool first = early && append && !env_is("HYPIC_CUDA_QK_TRIGGER_FIRST", "0");
  // With the append, the slot, position and angles read before the wait (the batch-1 step 0.9% faster on an H100,
  // batch 8 unchanged). HYPIC_CUDA_QK_PRE_ANGLES=0: after it (A/B runs).
  const bool pre = append && !env_is("HYPIC_CUDA_QK_PRE_ANGLES", "0");
  detail::launch_pdl(pdl, qk_norm_rope_kernel, dim3(detail::blocks_for(items, kQkWarps)), dim3(kQkWarps * 32), 0,
                     stream, q_src, q_stride, q, k, T, int(H), int(Hkv), int(head_dim), q_norm, k_norm, eps,
                     zero_centred, int(rot_dim / 2), positions, inv_freq_table(rot_dim, theta),
                     append ? append->v_new : static_cast<const bf16*>(nullptr),
                     append ? append->slots : static_cast<const KvSlot*>(nullptr), early, first, pre);
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

void rope_inv_freq(int64_t rot_dim, double theta, float* out) {
  check(rot_dim, rot_dim, "rope_inv_freq");
  const Table t = inv_freq_table(rot_dim, theta);
  for (int64_t d = 0; d < rot_dim / 2; ++d) out[d] = t.a[d];
}

void rope_shift_table(int64_t rot_dim, int64_t delta, double theta, float* cos_out, float* sin_out) {
  check(rot_dim, rot_dim, "rope_shift_table");
  const Table t = shift_table(rot_dim, delta, theta);
  for (int64_t d = 0; d < rot_dim / 2; ++d) {
    cos_out[d] = t.a[d];
    sin_out[d] = t.b[d];
  }
}

void kv_append_ranges(const KvRange* ranges, const float* tables, int64_t n_ranges, int64_t first_row,
                      int64_t total_rows, bf16* K, bf16* V, int64_t* pos, int64_t heads, int64_t head_dim,
                      int64_t rot_dim, cudaStream_t stream) {
  if (rot_dim != 0) check(head_dim, rot_dim, "kv_append_ranges");  // 0: keys without RoPE, copied as they are
  if (n_ranges <= 0 || total_rows <= 0) return;
  HYPIC_CUDA_REQUIRE(total_rows < (int64_t{1} << 31), "kv_append_ranges: too many rows for one call");
  const int64_t w = heads * head_dim;
  const bool vec = head_dim % 8 == 0 && (rot_dim / 2) % 8 == 0 && reinterpret_cast<uintptr_t>(K) % 16 == 0 &&
                   reinterpret_cast<uintptr_t>(V) % 16 == 0;
  // A row of 8-element groups takes w / 8 threads (64 for two heads of 256), rounded to whole warps.
  const unsigned threads = vec ? unsigned(std::min<int64_t>(128, (w / 8 + 31) / 32 * 32)) : 128u;
  detail::launch_pdl(detail::pdl_chain_enabled(), kv_append_ranges_kernel, dim3(unsigned(total_rows)), dim3(threads),
                     0, stream, ranges, tables, int(n_ranges), first_row, K, V, pos, int(heads), int(head_dim),
                     int(rot_dim / 2), vec);
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
