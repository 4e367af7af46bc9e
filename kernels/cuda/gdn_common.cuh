// Shared pieces of the chunked Gated DeltaNet kernels (gdn_prep.cu, gdn_state.cu, gdn_output.cu): chunk
// geometry, the workspace layout, and the warp-level load helpers (cp.async, ldmatrix) they use to feed
// mma.sync m16n8k16 (fragment layouts in kernels/cuda/mma.cuh).
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kernels/cuda/delta_rule.h"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/env_switch.h"
#include "kernels/cuda/mma.cuh"

namespace hypic::cuda::gdn {

constexpr int kC = 64;  // chunk length

// Padded key dim (tiles are DK wide, zero beyond dk) and value dim (a multiple of 64).
inline int padded_dk(int64_t dk) { return dk <= 64 ? 64 : 128; }
inline int64_t padded_dv(int64_t dv) { return (dv + 63) / 64 * 64; }

// Chunk slots. Chunk c of sequence n lives in slot bos_n / 64 + n + c: the slots of different sequences
// never overlap (bos_{n+1} / 64 + 1 >= bos_n / 64 + ceil(len_n / 64)) and there are at most T / 64 + N + 1,
// so every chunk gets full 64-row workspace tiles without a prefix sum over the sequence lengths.
inline int64_t slot_count(const GdnShape& s) { return s.T / kC + s.N + 1; }

// Workspace, per value head and slot (tiles contiguous, zero in padded rows and columns):
//   W  [H, slots, 64, DK]  bf16   A diag(beta e^G) K
//   UV [H, slots, 64, DVP] bf16   U = A diag(beta) V from gdn_prep, overwritten in place by gdn_state
//                                  with the chunk's true pseudo-values Vn = U - W S (read by gdn_output)
//   Sh [H, slots, DK, DVP] bf16   state at the start of every chunk (written only when outputs are wanted)
//   G  [H, slots, 64]      fp32   in-chunk cumulative log decay (padded rows repeat the last one)
// When the walk writes the outputs itself (output_in_walk), Sh is never written and its space holds instead
//   Aqk [H, slots, 64, 64] bf16   tril(Q K^T) o e^{G_i - G_j} of every chunk, from gdn_prep
// and, where gdn_prep runs beside the walk (launch_overlapped), after Aqk (ready_offset)
//   ready [H, slots, 4]   int32   [0] set by gdn_prep once a tile is written; the walk waits for it (16 bytes a
//                                  tile: the walk copies a flag to shared memory with cp.async.cg)
struct Workspace {
  bf16* W;
  bf16* UV;
  bf16* Sh;
  float* G;
  bf16* Aqk = nullptr;
  int32_t* ready = nullptr;  // per tile, 16 bytes apart: nonzero once gdn_prep has written it (the overlapped launch)
  // Set by plan_u_in_walk: the value input, which the register-state walk reads to form U itself; then W holds -W
  // and UV's tiles hold A diag(beta) in their first 64 columns (written by gdn_prep_sm90.cu only).
  const bf16* V = nullptr;
  // Set by plan_wu_in_walk (with V): the walk's second warpgroup forms W = A diag(beta) diag(e^G) K as well as U, so
  // gdn_prep writes neither (W's tiles are left unwritten); only for walks that write the outputs and build no T.
  bool wu = false;
  int64_t slots;
  int dkp;      // DK
  int64_t dvp;  // DVP
};

inline size_t workspace_bytes(const GdnShape& s) {
  using detail::align128;
  const size_t tiles = size_t(s.H) * size_t(slot_count(s));
  const size_t dkp = size_t(padded_dk(s.dk)), dvp = size_t(padded_dv(s.dv));
  return align128(sizeof(bf16) * tiles * kC * dkp) + align128(sizeof(bf16) * tiles * kC * dvp) +
         align128(sizeof(bf16) * tiles * dkp * dvp) + align128(sizeof(float) * tiles * kC);
}

inline Workspace carve(const GdnShape& s, void* ws) {
  using detail::align128;
  const size_t tiles = size_t(s.H) * size_t(slot_count(s));
  const size_t dkp = size_t(padded_dk(s.dk)), dvp = size_t(padded_dv(s.dv));
  auto* p = static_cast<unsigned char*>(ws);
  Workspace w{};
  w.W = reinterpret_cast<bf16*>(p);
  p += align128(sizeof(bf16) * tiles * kC * dkp);
  w.UV = reinterpret_cast<bf16*>(p);
  p += align128(sizeof(bf16) * tiles * kC * dvp);
  w.Sh = reinterpret_cast<bf16*>(p);
  p += align128(sizeof(bf16) * tiles * dkp * dvp);
  w.G = reinterpret_cast<float*>(p);
  w.slots = slot_count(s);
  w.dkp = int(dkp);
  w.dvp = int64_t(dvp);
  return w;
}

// The bodies workspace of gdn_chunked_prefill_with_bodies: one compact tile per value head and sequence
// (slots = N, no chunk start states), after the main workspace.
inline size_t bodies_workspace_bytes(const GdnShape& s) {
  using detail::align128;
  const size_t tiles = size_t(s.H) * size_t(s.N);
  const size_t dkp = size_t(padded_dk(s.dk)), dvp = size_t(padded_dv(s.dv));
  return align128(sizeof(bf16) * tiles * kC * dkp) + align128(sizeof(bf16) * tiles * kC * dvp) +
         align128(sizeof(float) * tiles * kC);
}
// S(lead) of every sequence and head, [N, H, dk, dv] fp32, after the bodies workspace.
inline size_t lead_state_bytes(const GdnShape& s) {
  return detail::align128(sizeof(float) * size_t(s.N) * size_t(s.H) * size_t(s.dk) * size_t(s.dv));
}
inline Workspace carve_bodies(const GdnShape& s, void* ws) {
  using detail::align128;
  const size_t tiles = size_t(s.H) * size_t(s.N);
  const size_t dkp = size_t(padded_dk(s.dk)), dvp = size_t(padded_dv(s.dv));
  auto* p = static_cast<unsigned char*>(ws);
  Workspace w{};
  w.W = reinterpret_cast<bf16*>(p);
  p += align128(sizeof(bf16) * tiles * kC * dkp);
  w.UV = reinterpret_cast<bf16*>(p);
  p += align128(sizeof(bf16) * tiles * kC * dvp);
  w.Sh = nullptr;
  w.G = reinterpret_cast<float*>(p);
  w.slots = s.N;
  w.dkp = int(dkp);
  w.dvp = int64_t(dvp);
  return w;
}
struct SeqRange {
  int64_t bos, eos;
};

__device__ __forceinline__ SeqRange seq_range(const int32_t* cu, int64_t n, int64_t T) {
  return cu ? SeqRange{cu[n], cu[n + 1]} : SeqRange{0, T};
}

__device__ __forceinline__ int64_t first_slot(int64_t bos, int64_t n) { return bos / kC + n; }

// ---------------------------------------------------------------------------------------------------
// Loads. Lane = 4 g + t as in mma.cuh.

// The PTX wrappers live in mma.cuh; these names keep the GDN kernels' call sites short.
using detail::cp_async_commit;
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, bool valid) {
  detail::cp_async_16(smem, gmem, valid ? 16 : 0);
}
__device__ __forceinline__ void cp_async_wait_all() { detail::cp_async_wait<0>(); }

__device__ __forceinline__ bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

// Copies rows [0, rows_valid) x columns [0, cols_valid) of a bf16 matrix (row stride src_ld) into the
// ROWS x COLS shared tile dst (row stride dst_ld), zero elsewhere, by a block of NT threads. Asynchronous
// 16-byte copies when the layout allows (the caller commits and waits), plain stores otherwise. The thread
// to element mapping is fixed at compile time, so the fast path unrolls to bare cp.async instructions.
template <int NT, int ROWS, int COLS>
__device__ __forceinline__ void load_tile(bf16* dst, int dst_ld, const bf16* src, int64_t src_ld, int rows_valid,
                                          int cols_valid) {
  constexpr int kV = COLS / 8;
  static_assert(NT % kV == 0, "a thread keeps one column group");
  if (cols_valid % 8 == 0 && src_ld % 8 == 0 && aligned16(src)) {
    constexpr int kStep = NT / kV;
    const int c = (threadIdx.x % kV) * 8;
#pragma unroll
    for (int i = 0; i < (ROWS + kStep - 1) / kStep; ++i) {
      const int r = int(threadIdx.x) / kV + i * kStep;
      if (ROWS % kStep != 0 && r >= ROWS) break;
      const bool valid = r < rows_valid && c < cols_valid;
      cp_async16(dst + r * dst_ld + c, valid ? src + r * src_ld + c : src, valid);
    }
  } else {
    for (int i = threadIdx.x; i < ROWS * COLS; i += NT) {
      const int r = i / COLS, c = i % COLS;
      dst[r * dst_ld + c] = (r < rows_valid && c < cols_valid) ? src[r * src_ld + c] : __float2bfloat16_rn(0.0f);
    }
  }
}

// A full ROWS x COLS tile of a workspace array (always 16-byte aligned, no padding to fill).
template <int NT, int ROWS, int COLS>
__device__ __forceinline__ void load_tile_full(bf16* dst, int dst_ld, const bf16* src, int64_t src_ld) {
  constexpr int kV = COLS / 8;
  static_assert(NT % kV == 0, "a thread keeps one column group");
  constexpr int kStep = NT / kV;
  const int c = (threadIdx.x % kV) * 8;
#pragma unroll
  for (int i = 0; i < (ROWS + kStep - 1) / kStep; ++i) {
    const int r = int(threadIdx.x) / kV + i * kStep;
    if (ROWS % kStep != 0 && r >= ROWS) break;
    cp_async16(dst + r * dst_ld + c, src + r * src_ld + c, true);
  }
}

__device__ __forceinline__ void ldsm_x4(uint32_t r[4], const bf16* p) { detail::ldmatrix_x4(r, p); }
__device__ __forceinline__ void ldsm_x4_t(uint32_t r[4], const bf16* p) { detail::ldmatrix_x4_trans(r, p); }

// A fragment (16 x 16 at m0, k0) of a row-major [m][k] tile.
__device__ __forceinline__ void frag_a(uint32_t a[4], const bf16* s, int ld, int m0, int k0) {
  const int lane = threadIdx.x % 32;
  ldsm_x4(a, s + (m0 + lane % 16) * ld + k0 + (lane / 16) * 8);
}
// A fragment (16 x 16 at m0, k0) of A = X^T, X a row-major [k][m] tile.
__device__ __forceinline__ void frag_a_t(uint32_t a[4], const bf16* s, int ld, int m0, int k0) {
  const int lane = threadIdx.x % 32, mi = lane / 8;
  ldsm_x4_t(a, s + (k0 + (mi / 2) * 8 + lane % 8) * ld + m0 + (mi % 2) * 8);
}
// B fragments of the two n-tiles n0..n0+7 (b0) and n0+8..n0+15 (b1) at k0, from a row-major [k][n] tile.
__device__ __forceinline__ void frag_b_kn(uint32_t b0[2], uint32_t b1[2], const bf16* s, int ld, int k0, int n0) {
  const int lane = threadIdx.x % 32, mi = lane / 8;
  uint32_t r[4];
  ldsm_x4_t(r, s + (k0 + (mi % 2) * 8 + lane % 8) * ld + n0 + (mi / 2) * 8);
  b0[0] = r[0], b0[1] = r[1], b1[0] = r[2], b1[1] = r[3];
}
// The same from a tile stored n-major, [n][k] (B = X^T: e.g. the keys in Q K^T).
__device__ __forceinline__ void frag_b_nk(uint32_t b0[2], uint32_t b1[2], const bf16* s, int ld, int k0, int n0) {
  const int lane = threadIdx.x % 32, mi = lane / 8;
  uint32_t r[4];
  ldsm_x4(r, s + (n0 + (mi / 2) * 8 + lane % 8) * ld + k0 + (mi % 2) * 8);
  b0[0] = r[0], b0[1] = r[1], b1[0] = r[2], b1[1] = r[3];
}

__device__ __forceinline__ void st_bf16x2(bf16* p, float lo, float hi) {
  *reinterpret_cast<__nv_bfloat162*>(p) = __floats2bfloat162_rn(lo, hi);
}

// Copies a ROWS x COLS bf16 shared tile to global memory with 16-byte stores by NT threads (both row
// strides multiples of 8 elements, the destination 16-byte aligned). STREAM: evict-first stores, for tiles
// that only a later kernel reads back.
template <int NT, int ROWS, int COLS, bool STREAM = false>
__device__ __forceinline__ void store_tile16(bf16* dst, int64_t dst_ld, const bf16* src, int src_ld) {
  constexpr int kV = COLS / 8;
  static_assert(NT % kV == 0, "a thread keeps one column group");
  constexpr int kStep = NT / kV;
  const int c = (threadIdx.x % kV) * 8;
#pragma unroll
  for (int i = 0; i < (ROWS + kStep - 1) / kStep; ++i) {
    const int r = int(threadIdx.x) / kV + i * kStep;
    if (ROWS % kStep != 0 && r >= ROWS) break;
    const int4 x = *reinterpret_cast<const int4*>(src + r * src_ld + c);
    if (STREAM)
      __stcs(reinterpret_cast<int4*>(dst + r * dst_ld + c), x);
    else
      *reinterpret_cast<int4*>(dst + r * dst_ld + c) = x;
  }
}

__device__ __forceinline__ void prefetch_l2(const void* p) { asm volatile("prefetch.global.L2 [%0];\n" ::"l"(p)); }

// ---------------------------------------------------------------------------------------------------
// The state walk's chunk bookkeeping, shared by its two forms (gdn_state.cu, gdn_state_sm90.cu).

// The chunks block (value head h, sequence n) walks. A body walk (a T block with `lead`) starts at the chunk
// holding row lead[n], whose tiles (its leading rows made no-ops) come from the bodies workspace, the later
// chunks being the forward's own; the forward walk of a state block takes S(lead) in chunk lead_c, at its
// start (lead_m == 0) or after its first lead_m rows.
struct WalkRange {
  SeqRange sr;
  int nchunks;
  int64_t tile0;  // the workspace tile of chunk 0
  int first, lead_c, lead_m;
  bool body;      // a body walk: chunk `first` comes from the bodies workspace
  __device__ int chunk_len(int c) const {
    const int64_t left = sr.eos - sr.bos - int64_t(c) * kC;
    return int(left < kC ? left : kC);
  }
  __device__ int64_t t0(int c) const { return sr.bos + int64_t(c) * kC; }  // the chunk's first row
  // Where chunk c's W, U and G tiles are: `tile` of the returned workspace.
  __device__ const Workspace& source(int c, const Workspace& w, const Workspace& bodies, int64_t h, int64_t n,
                                     int64_t& tile) const {
    const bool own = body && c == first;
    tile = own ? h * bodies.slots + n : tile0 + c;
    return own ? bodies : w;
  }
};
__device__ __forceinline__ WalkRange walk_range(const GdnShape& s, const int32_t* cu, int64_t n, int64_t h,
                                                const Workspace& w, const int32_t* lead, bool body, bool is_T) {
  WalkRange r;
  r.sr = seq_range(cu, n, s.T);
  r.nchunks = int((r.sr.eos - r.sr.bos + kC - 1) / kC);
  r.tile0 = h * w.slots + first_slot(r.sr.bos, n);
  const int lead_n = lead ? int(lead[n]) : 0;
  r.first = body ? min(lead_n / kC, r.nchunks) : 0;
  r.lead_c = (lead && !is_T) ? lead_n / kC : -1;
  r.lead_m = lead_n % kC;
  r.body = body;
  return r;
}

// The walk is latency-bound: pulling the tiles of a chunk a few ahead into L2 keeps the cp.async of the next
// one an L2 hit. One 128-byte line a thread and tile (NT >= 3 * 64 + 2 threads). W and G are the head's, K the
// key head's: only lead_w / lead_k blocks pull them (the sibling blocks walk in step and read the same
// tiles; their repeats were 30% of the walk's L2 requests). U: this block's columns from c0, when with_u.
template <int NT, int DK>
__device__ __forceinline__ void walk_prefetch_l2(const GdnShape& s, const bf16* k, int64_t kh, const Workspace& w,
                                                 const WalkRange& r, int c, int64_t c0, bool lead_w, bool lead_k,
                                                 bool with_u) {
  static_assert(NT >= 3 * kC + 2, "a thread a line");
  const int tid = threadIdx.x;
  const int64_t t0 = r.sr.bos + int64_t(c) * kC;
  if (lead_w && tid < kC * DK * 2 / 128)
    prefetch_l2(reinterpret_cast<const char*>(w.W + (r.tile0 + c) * kC * DK) + tid * 128);
  if (tid < 2 * kC) {
    const int row = tid / 2, half = tid % 2;
    if (lead_k && row < r.chunk_len(c) && half * 64 < s.dk) prefetch_l2(k + ((t0 + row) * s.Hk + kh) * s.dk + half * 64);
  } else if (tid < 3 * kC) {
    if (with_u) prefetch_l2(w.UV + ((r.tile0 + c) * kC + tid - 2 * kC) * w.dvp + c0);
  } else if (tid < 3 * kC + 2) {
    if (lead_w) prefetch_l2(w.G + (r.tile0 + c) * kC + (tid - 3 * kC) * 32);
  }
}

constexpr int kReadyStride = 4;  // int32 a ready flag takes
// Where the ready flags start within Sh's space (after Aqk), and whether that space holds them.
inline size_t ready_offset(const GdnShape& s) {
  return detail::align128(sizeof(bf16) * size_t(s.H) * size_t(slot_count(s)) * kC * kC);
}
inline bool ready_fits(const GdnShape& s) {
  const size_t tiles = size_t(s.H) * size_t(slot_count(s));
  return ready_offset(s) + kReadyStride * sizeof(int32_t) * tiles <=
         sizeof(bf16) * tiles * size_t(padded_dk(s.dk)) * size_t(padded_dv(s.dv));
}

// The ready flags. gdn_prep releases a tile's flag at GPU scope after its stores (which reach L2 first). The walk
// copies the next chunk's flag into shared memory (cp.async.cg, from L2) a chunk ahead of need and spins on the flag
// only when that copy found it clear: an acquire there would hold its warp, and so the warpgroup's products, for an
// L2 round trip every chunk. What the walk then reads of the tile it reads from L2 only (bulk tensor copies and .cg
// loads), issued after the flag read returned set, so it sees the stores released before the flag; the proxy fence
// orders the flag read before the bulk copies (async proxy).
__device__ __forceinline__ void ready_release(int32_t* f) {
  asm volatile("st.release.gpu.global.b32 [%0], %1;\n" ::"l"(f), "r"(1) : "memory");
}
// Spins until *f is set. A flag still clear after 10 s means its prep block cannot run (a launch that broke
// launch_overlapped's conditions): the kernel traps, so the launch fails with an error instead of hanging.
__device__ __forceinline__ void ready_spin(const int32_t* f) {
  int32_t v = 0;
  uint64_t t0 = 0, t = 0;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  for (;;) {
    asm volatile("ld.relaxed.gpu.global.b32 %0, [%1];\n" : "=r"(v) : "l"(f) : "memory");
    if (v != 0) return;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    if (t - t0 > 10000000000ull) __trap();
  }
}
__device__ __forceinline__ void ready_fence() { asm volatile("fence.proxy.async.global;\n" ::: "memory"); }

// ---------------------------------------------------------------------------------------------------
// Launchers (one per kernel file), all on `stream`, in this order.

// lead (device [N], or null): prepare only the chunk holding row lead[n] of every sequence, its rows
// before lead[n] made no-ops, into tile h * w.slots + n of a bodies workspace (carve_bodies). With w.Aqk
// (and q) also every chunk's Aqk.
void launch_prep(const GdnShape& s, const bf16* q, const bf16* k, const bf16* v, const float* g, const float* beta,
                 const int32_t* cu, int64_t max_chunks, const Workspace& w, cudaStream_t stream,
                 const int32_t* lead = nullptr);
// Chunks [c_begin, c_end) of every sequence (no lead), blocks in chunk-major order (a chunk's heads next to each
// other) so that the walk beside it finds its chunks in the order it needs them; sets w.ready's flags when given.
void launch_prep_range(const GdnShape& s, const bf16* q, const bf16* k, const bf16* v, const float* g,
                       const float* beta, const int32_t* cu, int64_t c_begin, int64_t c_end, const Workspace& w,
                       cudaStream_t stream);
// gdn_prep's products on Hopper's warpgroup products (gdn_prep_sm90.cu), where it fits (an sm_90 device, dk 128, dv
// a multiple of 128, 16-byte aligned q, k and v) and applies: unless HYPIC_CUDA_GDN_PREP_SM90=0, and always for a workspace
// planned with U formed in the walk (w.V). launch_prep and launch_prep_range take it there; grid, chunk_base and
// heads_fast as gdn_prep.cu's kernel has them.
bool prep_sm90_fits(const GdnShape& s, const bf16* q, const bf16* k, const bf16* v, const Workspace& w);
bool prep_sm90_applies(const GdnShape& s, const bf16* q, const bf16* k, const bf16* v, const Workspace& w);
void launch_prep_sm90(const GdnShape& s, const bf16* q, const bf16* k, const bf16* v, const float* g,
                      const float* beta, const int32_t* cu, const int32_t* lead, dim3 grid, int64_t chunk_base,
                      bool heads_fast, const Workspace& w, cudaStream_t stream);
// True where launch_state, given q and out, writes the outputs itself (the Hopper walk at dk 128: O = e^G Q S +
// Aqk Vn as it goes, with Aqk from gdn_prep), so that neither Sh nor gdn_output is needed; then w.Aqk is set
// (over Sh's space). HYPIC_CUDA_GDN_FUSED_OUT=0: never (A/B runs).
bool plan_output_in_walk(const GdnShape& s, Workspace& w, const bf16* q, const bf16* k, bool transfer, const bf16* out);
// lead (device [N], or null): walk every sequence from the chunk holding row lead[n] only, reading that
// chunk from `bodies` (prepared by launch_prep with the same lead) and the later ones from w.
// q, out (with w.Aqk, where output_in_walk holds): the walk writes the outputs too.
void launch_state(const GdnShape& s, const bf16* k, const int32_t* cu, float* state, float* transfer, bool want_out,
                  const Workspace& w, cudaStream_t stream, const int32_t* lead = nullptr,
                  const Workspace* bodies = nullptr, float* lead_state = nullptr, const bf16* q = nullptr,
                  bf16* out = nullptr);
// launch_state's walk of bv (32 or 64) columns a block on Hopper's warpgroup products (gdn_state_sm90.cu), where
// it applies: an sm_90 device, dk 128, dv a multiple of bv, 16-byte aligned keys (HYPIC_CUDA_GDN_SM90 narrows it
// for A/B runs). Returns false, launching nothing, elsewhere.
bool state_sm90_applies(const GdnShape& s, const Workspace& w, const bf16* k, int bv);
bool launch_state_sm90(const GdnShape& s, const bf16* k, const int32_t* cu, float* state, float* transfer,
                       bool want_out, const Workspace& w, cudaStream_t stream, const int32_t* lead,
                       const Workspace& bodies, float* lead_state, int bv, const bf16* q, bf16* out);
// The walk with the state in registers (gdn_walk_rs_sm90.cu): 64 columns a block, where launch_state_sm90's
// 64-column form applies and the launch is a plain one (no lead) that either writes the outputs itself (q, out and
// w.Aqk) or wants none. HYPIC_CUDA_GDN_RS=0: never (A/B runs). Returns false, launching nothing, elsewhere.
bool walk_rs_applies(const GdnShape& s, const Workspace& w, const bf16* k, bool want_out, const bf16* q,
                     const bf16* out);
bool launch_walk_rs(const GdnShape& s, const bf16* k, const int32_t* cu, float* state, float* transfer, bool want_out,
                    const Workspace& w, cudaStream_t stream, const bf16* q, bf16* out);
// HYPIC_CUDA_GDN_U_IN_WALK=1 (opt-in; measured slower on an H100): where the register-state walk and gdn_prep_sm90.cu
// both apply to gdn_chunked_prefill's call (q, out, and whether plan_output_in_walk put the outputs in the walk), sets
// w.V so that prep writes A diag(beta) and -W, and the walk (two stages) forms U^T = V^T (A diag(beta))^T itself: prep
// neither reads V nor writes U.
bool plan_u_in_walk(const GdnShape& s, Workspace& w, const bf16* q, const bf16* k, const bf16* v, const bf16* out,
                    bool fused);
// W and U formed in the walk (gdn_walk_rs_sm90.cu; by default, HYPIC_CUDA_GDN_WU_IN_WALK=0 never): for a call whose
// walk writes the outputs (fused) and builds no T, sets w.V and w.wu so that prep writes only A diag(beta), Aqk and G;
// the walk's second warpgroup forms each chunk's -W from K and A diag(beta) a chunk ahead of the state's warpgroup (and
// writes the outputs), and the state's warpgroup U^T = V^T (A diag(beta))^T at the head of its X group. Prep then
// neither reads V nor writes W and U. Returns whether it applies.
bool plan_wu_in_walk(const GdnShape& s, Workspace& w, const bf16* q, const bf16* k, const bf16* v, const bf16* out,
                     bool fused, bool transfer);
// Blocks of the register-state walk's launch (every one on an SM of its own), beside gdn_prep (launch_overlapped) or
// not: where dv is a multiple of 128, a block walks 128 columns on two warpgroups where blocks of one would be more
// than the SMs, or beside prep for a long sequence with T (HYPIC_CUDA_GDN_WALK_PAIR: =1 beside prep, =all in every
// launch, =0 never; gdn_walk_rs_sm90.cu's warpgroups()).
int64_t walk_rs_blocks(const GdnShape& s, const Workspace& w, bool transfer, bool beside);
// gdn_prep beside the walk (gdn_overlap.cu): the walk waits for each chunk's ready flag instead of for a whole prep
// launch, and the chunks past the first ones are prepared on the SMs the walk leaves free. It applies (overlap_applies)
// with the register-state walk, its blocks at most half the SMs, and HYPIC_CUDA_GDN_OVERLAP not 0; out is null or
// written by the walk (plan_output_in_walk). launch_overlapped does prep and walk where it applies.
bool overlap_applies(const GdnShape& s, const Workspace& w, const bf16* q, const bf16* k, const bf16* out,
                     bool transfer, int64_t max_chunks);
void launch_overlapped(const GdnShape& s, const bf16* q, const bf16* k, const bf16* v, const float* g,
                       const float* beta, const int32_t* cu, int64_t max_chunks, float* state, float* transfer,
                       Workspace& w, cudaStream_t stream, bf16* out);
// body_state = state - transfer lead_state per (sequence, head): [N, H, dk, dv] fp32, transfer [N, H, dk, dk];
// with `out`, written to (and T and the state copied to) each sequence's own buffers instead.
void launch_body_state(const GdnShape& s, const float* transfer, const float* state, const float* lead_state,
                       float* body_state, const BodyOutputs& out, cudaStream_t stream);
void launch_output(const GdnShape& s, const bf16* q, const bf16* k, const int32_t* cu, int64_t max_chunks,
                   bf16* out, const Workspace& w, cudaStream_t stream);

}  // namespace hypic::cuda::gdn
