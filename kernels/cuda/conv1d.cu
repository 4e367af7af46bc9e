#include <algorithm>

#include "kernels/cuda/check.h"
#include "kernels/cuda/conv1d.h"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/mma.cuh"
#include "kernels/cuda/pdl_launch.cuh"

namespace hypic::cuda {
namespace {

constexpr int kMaxK = 8;
constexpr int kSpan = 16;  // at most this many tokens per thread: it slides its window along them
// Fewer tokens per thread for short inputs (a stitch's seams, a decode batch), so that the grid still has
// about this many blocks instead of a few dozen.
constexpr int64_t kConvBlocks = 1024;
constexpr int kConvThreads = 128;

// 8 consecutive bf16 channels as floats; 16-byte loads and stores where the address allows.
template <int V>
struct Lanes {
  float v[V];
};
// 16 bytes of bf16 as 8 floats.
__device__ __forceinline__ Lanes<8> lanes8(uint4 u) {
  Lanes<8> r;
  detail::bf16x8_to_float(u, r.v);
  return r;
}
template <int V>
__device__ __forceinline__ Lanes<V> load_lanes(const bf16* p) {
  Lanes<V> r;
  if constexpr (V == 8) {
    if ((reinterpret_cast<uintptr_t>(p) & 15) == 0) {
      r = lanes8(*reinterpret_cast<const uint4*>(p));
      return r;
    }
  }
#pragma unroll
  for (int i = 0; i < V; ++i) r.v[i] = __bfloat162float(p[i]);
  return r;
}

// Threads run along channels (V consecutive channels each, coalesced rows) and each slides a K-tap window
// over `span` (<= kSpan) consecutive rows of the packed input; a span may cross into later sequences, whose windows
// restart from their own tails. Sequence n holds rows [cu[n], cu[n+1]) (cu null: one sequence of T rows
// with `tail`). V = 8 needs C % 8 == 0 and 16-byte aligned x and out.
// The split form's store of one row's 8 channels: q / k heads normalised over their head's lanes (G = head / 8
// consecutive lanes, G a power of two <= 32 so that a head never straddles a warp), v as is.
__device__ __forceinline__ void store_split(const ConvSplit& sp, int64_t r, int64_t c, int64_t C, const float (&y)[8]) {
  const int64_t a = sp.key_width;
  float o[8];
  bf16* dst;
  if (c < 2 * a) {
    const bool is_q = c < a;
    float ss = 0.0f;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      o[i] = detail::round_bf16(y[i]);  // what the unsplit conv stores
      ss += o[i] * o[i];
    }
    const int G = int(sp.head / 8);
    const unsigned lane = threadIdx.x % 32;
    const unsigned mask = G == 32 ? 0xffffffffu : ((1u << G) - 1) << (lane & ~unsigned(G - 1));
    // xor butterfly: every lane of the head ends with the same sum (each step adds the same two partials)
    for (int s = G / 2; s >= 1; s /= 2) ss += __shfl_xor_sync(mask, ss, s);
    const float f = (is_q ? sp.q_scale : 1.0f) / sqrtf(ss + sp.eps);
#pragma unroll
    for (int i = 0; i < 8; ++i) o[i] *= f;
    dst = is_q ? sp.q + r * a + c : sp.k + r * a + (c - a);
  } else {
#pragma unroll
    for (int i = 0; i < 8; ++i) o[i] = y[i];
    dst = sp.v + r * (C - 2 * a) + (c - 2 * a);
  }
  uint4 u;
  __nv_bfloat162* h = reinterpret_cast<__nv_bfloat162*>(&u);
#pragma unroll
  for (int i = 0; i < 4; ++i) h[i] = __floats2bfloat162_rn(o[2 * i], o[2 * i + 1]);
  *reinterpret_cast<uint4*>(dst) = u;
}

template <int K, int V, bool kSplit>
__global__ void __launch_bounds__(kConvThreads) conv_kernel(const bf16* __restrict__ x, const int32_t* __restrict__ cu,
                                                            int64_t N, int64_t T, int64_t C, const bf16* __restrict__ w,
                                                            const bf16* const* __restrict__ tails,
                                                            const bf16* __restrict__ tail1, bf16* __restrict__ out,
                                                            int span, ConvSplit sp) {
  static_assert(!kSplit || V == 8, "the split form stores 8 channels a thread");
  constexpr int P = K - 1;
  const int64_t c = (int64_t(blockIdx.y) * kConvThreads + threadIdx.x) * V;
  const int64_t r0 = int64_t(blockIdx.x) * span;
  // A stitch's conv is a few rows a thread: its time is the chain of dependent loads before the first row, so
  // the weights (constant) load before the wait for the predecessor, and the rows' copies are in flight
  // while the sequence holding r0 is found.
  float wc[V][K];
  if (c < C) {
#pragma unroll
    for (int i = 0; i < V; ++i)
#pragma unroll
      for (int m = 0; m < K; ++m) wc[i][m] = __bfloat162float(w[(c + i) * K + m]);
  }
  detail::pdl_wait();
  if (r0 >= T) return;  // the whole block
  const int64_t r1 = r0 + span < T ? r0 + span : T;
  // V = 8: the thread's rows (its span and the P before it) are copied into shared memory up front, all in
  // flight at once (one row's load at a time left the kernel latency-bound, at ~40% of the bandwidth);
  // stage[(row - (r0 - P)) * kConvThreads + thread], 16 bytes each.
  extern __shared__ uint4 stage[];
  if constexpr (V == 8) {
    if (c < C) {
      for (int64_t row = r0 - P > 0 ? r0 - P : 0; row < r1; ++row)
        detail::cp_async_16(stage + (row - (r0 - P)) * kConvThreads + threadIdx.x, x + row * C + c, 16);
    }
    detail::cp_async_commit();
  }
  // The sequence holding row r0: the last n with cu[n] <= r0 (empty sequences are skipped that way). r0 is the
  // block's, so each warp finds it with one load a lane (a binary search was five dependent loads).
  int64_t n = 0, s0 = 0, s1 = T;
  const bf16* tail = tail1;
  if (cu) {
    const int lane = int(threadIdx.x % 32);
    if (N <= 32) {
      const unsigned le = __ballot_sync(0xffffffffu, lane < N && cu[lane] <= r0);
      n = le ? 31 - __clz(int(le)) : 0;
    } else {
      int64_t lo = 0, hi = N - 1;
      while (lo < hi) {
        const int64_t mid = (lo + hi + 1) / 2;
        if (cu[mid] <= r0) lo = mid; else hi = mid - 1;
      }
      n = lo;
    }
    s0 = cu[n];
    s1 = cu[n + 1];
    tail = tails ? tails[n] : nullptr;
  }
  if (c >= C) return;
  if constexpr (V == 8) detail::cp_async_wait<0>();
  // The inputs of row `row` (>= max(r0 - P, 0), < r1).
  auto row_in = [&](int64_t row) {
    if constexpr (V == 8) {
      const uint4 u = stage[(row - (r0 - P)) * kConvThreads + threadIdx.x];
      Lanes<V> l = lanes8(u);
      return l;
    } else {
      return load_lanes<V>(x + row * C + c);
    }
  };
  float win[V][K];
  // win[.][0 .. P) = the inputs of rows r - P .. r - 1 of the sequence starting at s0 (its tail before it).
  auto fill = [&](int64_t r) {
#pragma unroll
    for (int m = 0; m < P; ++m) {
      const int64_t idx = r - s0 - P + m;
      Lanes<V> l;
      if (idx >= 0) {
        l = row_in(s0 + idx);
      } else if (tail) {
        l = load_lanes<V>(tail + (P + idx) * C + c);
      } else {
#pragma unroll
        for (int i = 0; i < V; ++i) l.v[i] = 0.0f;
      }
#pragma unroll
      for (int i = 0; i < V; ++i) win[i][m] = l.v[i];
    }
  };
  fill(r0);
  for (int64_t r = r0; r < r1; ++r) {
    if (r == s1) {  // the next (non-empty) sequence starts here
      while (cu[n + 1] <= r) ++n;
      s0 = cu[n];
      s1 = cu[n + 1];
      tail = tails ? tails[n] : nullptr;
      fill(r);
    }
    const Lanes<V> in = row_in(r);
    float y[V];
#pragma unroll
    for (int i = 0; i < V; ++i) {
      win[i][P] = in.v[i];
      float acc = 0.0f;
#pragma unroll
      for (int m = 0; m < K; ++m) acc += wc[i][m] * win[i][m];
      y[i] = detail::silu_f(acc);
#pragma unroll
      for (int m = 0; m < P; ++m) win[i][m] = win[i][m + 1];
    }
    bf16* o = out + r * C + c;
    if constexpr (kSplit) {
      store_split(sp, r, c, C, y);
    } else if constexpr (V == 8) {
      uint4 u;
      __nv_bfloat162* h = reinterpret_cast<__nv_bfloat162*>(&u);
#pragma unroll
      for (int i = 0; i < 4; ++i) h[i] = __floats2bfloat162_rn(y[2 * i], y[2 * i + 1]);
      *reinterpret_cast<uint4*>(o) = u;
    } else {
#pragma unroll
      for (int i = 0; i < V; ++i) o[i] = __float2bfloat16_rn(y[i]);
    }
  }
}

template <int K>
void launch_conv_k(const bf16* x, const int32_t* cu, int64_t N, int64_t T, int64_t C, const bf16* w,
                   const bf16* const* tails, const bf16* tail1, bf16* out, const ConvSplit* sp, cudaStream_t stream) {
  const bool vec = sp || (C % 8 == 0 && (reinterpret_cast<uintptr_t>(x) & 15) == 0 &&
                          (reinterpret_cast<uintptr_t>(out) & 15) == 0);
  const int V = vec ? 8 : 1;
  const int64_t col_blocks = detail::blocks_for(C, kConvThreads * V);
  const int span = int(std::clamp<int64_t>((T * col_blocks + kConvBlocks - 1) / kConvBlocks, 1, kSpan));
  const dim3 grid(unsigned((T + span - 1) / span), unsigned(col_blocks));
  const size_t stage_bytes = size_t(span + K - 1) * kConvThreads * 16;  // <= 23 rows x 2 KB: under the 48 KB default
  if (sp)
    detail::launch_pdl(detail::pdl_chain_enabled(), conv_kernel<K, 8, true>, dim3(grid), dim3(kConvThreads),
                       stage_bytes, stream, x, cu, N, T, C, w, tails, tail1, out, span, *sp);
  else if (vec)
    detail::launch_pdl(detail::pdl_chain_enabled(), conv_kernel<K, 8, false>, dim3(grid), dim3(kConvThreads),
                       stage_bytes, stream, x, cu, N, T, C, w, tails, tail1, out, span, ConvSplit{});
  else
    detail::launch_pdl(detail::pdl_chain_enabled(), conv_kernel<K, 1, false>, dim3(grid), dim3(kConvThreads), 0, stream,
                       x, cu, N, T, C, w, tails, tail1, out, span, ConvSplit{});
  HYPIC_CUDA_LAUNCH_CHECK();
}

void launch_conv(const bf16* x, const int32_t* cu, int64_t N, int64_t T, int64_t C, const bf16* w, int64_t K,
                 const bf16* const* tails, const bf16* tail1, bf16* out, const ConvSplit* sp, cudaStream_t stream) {
  HYPIC_CUDA_REQUIRE((T + kSpan - 1) / kSpan < (int64_t{1} << 31), "causal_conv1d_silu: too many rows for one call");
  switch (K) {
    case 2: return launch_conv_k<2>(x, cu, N, T, C, w, tails, tail1, out, sp, stream);
    case 3: return launch_conv_k<3>(x, cu, N, T, C, w, tails, tail1, out, sp, stream);
    case 4: return launch_conv_k<4>(x, cu, N, T, C, w, tails, tail1, out, sp, stream);
    case 5: return launch_conv_k<5>(x, cu, N, T, C, w, tails, tail1, out, sp, stream);
    case 6: return launch_conv_k<6>(x, cu, N, T, C, w, tails, tail1, out, sp, stream);
    case 7: return launch_conv_k<7>(x, cu, N, T, C, w, tails, tail1, out, sp, stream);
    default: return launch_conv_k<8>(x, cu, N, T, C, w, tails, tail1, out, sp, stream);
  }
}

// New tail = window rows T .. T+P-1. Rows come from x, or (when T < P) from higher tail rows, read before
// they are overwritten because each thread walks its channel in increasing j.
__global__ void tail_kernel(const bf16* __restrict__ x, int64_t T, int64_t C, int P, bf16* tail) {
  const int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= C) return;
  for (int j = 0; j < P; ++j) {
    const int64_t tp = T + j;
    tail[j * C + c] = tp < P ? tail[tp * C + c] : x[(tp - P) * C + c];
  }
}

__global__ void tail_varlen_kernel(const bf16* __restrict__ x, const int32_t* __restrict__ cu, int64_t C, int P,
                                   const bf16* const* __restrict__ tails_in, bf16* const* __restrict__ tails_out) {
  detail::pdl_wait();
  const int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  bf16* dst = tails_out[blockIdx.y];
  if (c >= C || !dst) return;
  const int64_t s0 = cu[blockIdx.y], T = cu[blockIdx.y + 1] - s0;
  const bf16* src = tails_in ? tails_in[blockIdx.y] : nullptr;
  for (int j = 0; j < P; ++j) {
    const int64_t tp = T + j;
    dst[j * C + c] = tp < P ? (src ? src[tp * C + c] : __float2bfloat16_rn(0.0f)) : x[(s0 + tp - P) * C + c];
  }
}

void conv_varlen(const bf16* x, const int32_t* cu, int64_t N, int64_t T, int64_t C, const bf16* w, int64_t K,
                 const bf16* const* tails_in, bf16* const* tails_out, bf16* out, const ConvSplit* sp,
                 cudaStream_t stream) {
  HYPIC_CUDA_REQUIRE(K >= 2 && K <= kMaxK, "causal_conv1d_silu_varlen: kernel size must be in [2, 8]");
  HYPIC_CUDA_REQUIRE(C > 0 && N >= 0 && T >= 0, "causal_conv1d_silu_varlen: bad shape");
  HYPIC_CUDA_REQUIRE(N <= 65535, "causal_conv1d_silu_varlen: at most 65535 sequences per call");
  if (N == 0) return;
  if (T > 0) launch_conv(x, cu, N, T, C, w, K, tails_in, nullptr, out, sp, stream);
  if (tails_out) {
    detail::launch_pdl(detail::pdl_chain_enabled(), tail_varlen_kernel,
                       dim3(detail::blocks_for(C, 128), unsigned(N)), dim3(128), 0, stream, x, cu, C, int(K - 1),
                       tails_in, tails_out);
    HYPIC_CUDA_LAUNCH_CHECK();
  }
}

void conv_one(const bf16* x, int64_t T, int64_t C, const bf16* w, int64_t K, bf16* tail, bf16* out,
              const ConvSplit* sp, cudaStream_t stream) {
  HYPIC_CUDA_REQUIRE(K >= 2 && K <= kMaxK, "causal_conv1d_silu: kernel size must be in [2, 8]");
  HYPIC_CUDA_REQUIRE(C > 0 && T >= 0, "causal_conv1d_silu: bad shape");
  if (T == 0) return;
  launch_conv(x, nullptr, 1, T, C, w, K, nullptr, tail, out, sp, stream);
  tail_kernel<<<detail::blocks_for(C, 128), 128, 0, stream>>>(x, T, C, int(K - 1), tail);
  HYPIC_CUDA_LAUNCH_CHECK();
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

void require_split(const bf16* x, int64_t C, const ConvSplit& sp) {
  HYPIC_CUDA_REQUIRE(conv_split_supported(x, C, sp),
                     "causal_conv1d_silu_split: unsupported shape (C % 8, head a power of two in [8, 256], "
                     "2 * key_width <= C in whole heads, 16-byte aligned x, q, k, v)");
}

}  // namespace

bool conv_split_supported(const bf16* x, int64_t C, const ConvSplit& sp) {
  const int64_t h = sp.head;
  return C % 8 == 0 && h >= 8 && h <= 256 && (h & (h - 1)) == 0 && sp.key_width >= 0 && sp.key_width % h == 0 &&
         2 * sp.key_width <= C && aligned16(x) && aligned16(sp.q) && aligned16(sp.k) && aligned16(sp.v);
}

void causal_conv1d_silu_varlen(const bf16* x, const int32_t* cu, int64_t N, int64_t T, int64_t C, const bf16* w,
                               int64_t K, const bf16* const* tails_in, bf16* const* tails_out, bf16* out,
                               cudaStream_t stream) {
  conv_varlen(x, cu, N, T, C, w, K, tails_in, tails_out, out, nullptr, stream);
}

void causal_conv1d_silu(const bf16* x, int64_t T, int64_t C, const bf16* w, int64_t K, bf16* tail, bf16* out,
                        cudaStream_t stream) {
  conv_one(x, T, C, w, K, tail, out, nullptr, stream);
}

void causal_conv1d_silu_split(const bf16* x, int64_t T, int64_t C, const bf16* w, int64_t K, bf16* tail,
                              const ConvSplit& out, cudaStream_t stream) {
  require_split(x, C, out);
  conv_one(x, T, C, w, K, tail, nullptr, &out, stream);
}

void causal_conv1d_silu_split_varlen(const bf16* x, const int32_t* cu, int64_t N, int64_t T, int64_t C, const bf16* w,
                                     int64_t K, const bf16* const* tails_in, bf16* const* tails_out,
                                     const ConvSplit& out, cudaStream_t stream) {
  require_split(x, C, out);
  conv_varlen(x, cu, N, T, C, w, K, tails_in, tails_out, nullptr, &out, stream);
}

}  // namespace hypic::cuda
