// The Gated DeltaNet state walk on Hopper with the state in registers as a wgmma A operand (dk 128, 64 state or
// transfer-operator columns a block of one warpgroup). gdn_state_sm90.cu keeps S as the B operand of W S, so every
// chunk stores S^T and Vd^T to shared memory and crosses two block barriers before the next product can read them.
// Here the walk runs on the transposed state: with X^T = S^T W^T the block's 64 columns are the products' M, S^T
// (fp32, the update's accumulator) turns into the next chunk's A fragments in registers, and so do Vn^T and Vd^T:
//   X   = S^T W^T                     m64n64,  K = dk        (A: S^T bf16, B: W K-major)
//   Vn^T = U^T - X,  Vd^T = Vn^T diag(e^{G_L - G_j})
//   S^T = e^{G_L} S^T + Vd^T K        m64n128, K = 64 rows   (A: Vd^T, B: K MN-major)
//   O^T = S^T Q^T diag(e^G) + Vn^T Aqk^T   m64n64 twice      (B: Q, Aqk K-major)
// No shared-memory round trip and no barrier sits between a chunk's products; the chunk's tiles arrive by bulk
// tensor copies (TMA, three stages), and one block barrier a chunk frees the oldest stage for them. The transfer
// operator's columns (T <- (e^{G_L} I - K_d^T W) T, U = 0, no outputs) are more blocks of the same launch. Same
// workspace, chunk order and outputs as gdn_state.cu; except that where plan_wu_in_walk applies (the outputs, no T),
// the block's second warpgroup forms each chunk's -W from K and A diag(beta), the state's warpgroup U^T from V and
// A diag(beta) at the head of X's product group, and prep writes neither.
//
// Accumulator and A-fragment layouts: sm90.cuh (thread i of the warpgroup, warp w, lane 4 g + t holds rows
// 16 w + g and 16 w + g + 8 of M, i.e. block columns c0 + 16 w + g (+ 8)).
#include <type_traits>

#include "kernels/cuda/check.h"
#include "kernels/cuda/gdn_common.cuh"
#include "kernels/cuda/gdn_sm90_tiles.cuh"
#include "kernels/cuda/pdl_launch.cuh"
#include "kernels/cuda/sm90.cuh"
#include "kernels/cuda/sm90_host.h"
#include "kernels/cuda/smem_limit.h"

namespace hypic::cuda::gdn {
namespace {

constexpr int kNT = 128;    // one warpgroup
constexpr int kDK = 128;    // key dim
constexpr int kCols = 64;   // state columns a block (the products' M)
// Chunks of tiles in flight (kStages, a template parameter): 3, chunk c computes while c + 1 and c + 2 land; or, beside
// gdn_prep with HYPIC_CUDA_GDN_OVERLAP_STAGES=2 (measured slower on an H100), 2: the smaller footprint leaves room for a prep block
// on each of the walk's SMs, where the walk mostly waits for its chunks' flags.
constexpr int kBox = kSwBox;
constexpr int kLdO = kCols + 8;  // row stride (elements) of the output staging tile: conflict-free stmatrix

// UW: U formed in the walk (plan_u_in_walk): the stage holds A diag(beta) where U's box was, and V's 64 columns.
// kWG: warpgroups a block, each walking 64 columns of its own over the same W, K, Q and Aqk tiles. With two, the
// stages (three of 56 KB, U's box left out) and the outputs' staging no longer fit beside U's boxes of three chunks,
// so U has a ring of two slots of its own, issued a chunk ahead (a slot is refilled once both warpgroups have read it).
// The warpgroups run free of each other (no block barrier a chunk): in step, both issued each product at the same time
// and waited for each other's on the one set of tensor cores (measured 26-33% slower than one warpgroup a block). A
// stage and a ring slot are refilled once every warp has released them (an arrival on an empty barrier), and a chunk's
// G comes with its tiles.
// kOW: a second warpgroup writes the outputs (walk's kOW); its warps need decay factors of their own and the block a
// barrier more a stage (a chunk's S^T and Vn handed over).
// kWU (with kOW and UW's nine boxes a stage): the second warpgroup also forms -W (walk's kWU). The stage's U box
// takes A diag(beta), then Vn; its V box V's 64 columns; its W boxes -W as formed; the outputs are staged in its
// first K box (no staging area of their own: three stages of 72 KB leave no room for one); a chunk's G comes with its
// tiles; and a barrier more a stage tells the state's warpgroup that -W is formed.
template <int kStages, bool UW = false, int kWG = 1, bool kOW = false, bool kWU = false>
struct Smem {
  static constexpr bool ring = kWG > 1;
  static constexpr bool gtile = ring || kWU;  // a stage's G comes with its tiles
  static constexpr int warps = 4 * (kOW ? 2 : kWG);
  static constexpr size_t w = 0;                     // W [2 boxes]
  static constexpr size_t k = w + 2 * kBox;          // K [2 boxes]
  static constexpr size_t u = k + 2 * kBox;          // U, this block's 64 columns [1 box]; with UW, A diag(beta)
  static constexpr size_t q = u + (ring ? 0 : kBox); // Q [2 boxes]
  static constexpr size_t a = q + 2 * kBox;          // Aqk [1 box]
  static constexpr size_t v = a + kBox;              // with UW: V, this block's 64 columns [1 box]
  static constexpr size_t stage = v + (UW ? kBox : 0);  // 64 KB (72 with UW, 56 with the ring)
  static constexpr size_t uring = kStages * stage;   // the ring: 2 slots of kWG boxes, warpgroup i's U in box i
  static constexpr size_t o = uring + (ring ? 2 * kWG * kBox : 0);  // outputs staged for 16-byte stores [64][kLdO] bf16
  static constexpr size_t fac = o + (kWU ? 0 : kWG * kC * kLdO * 2);  // per warp: e^G [64], e^{G_L - G} [64] (0 past
                                                                      // the chunk); kWU's second warpgroup: e^G twice
  static constexpr size_t g = fac + warps * 2 * kC * 4;      // with the ring or kWU: a stage's G [64] fp32
  static constexpr size_t bar = g + (gtile ? kStages * kC * 4 : 0);  // full barriers: a stage's, then a ring slot's;
  // With the ring (or kOW), empty ones after them; with kOW, then a stage's hand-over barriers; with kWU, a stage's
  // formed barriers.
  static constexpr int nbar = ring || kOW ? 2 * (kStages + 2) + (kOW ? kStages : 0) + (kWU ? kStages : 0) : kStages;
  static constexpr size_t flag = (bar + nbar * 8 + 15) / 16 * 16;  // a chunk's ready flag
  static constexpr size_t bytes = flag + 16 + 1024;    // + the slack that aligns the boxes
};

// A fragments (16-wide K slices) of a 64 x (16 KS) accumulator: slice kk takes its chunks 2 kk and 2 kk + 1.
template <int KS>
__device__ __forceinline__ void to_a(uint32_t (&a)[KS][4], const float (&d)[KS * 8]) {
#pragma unroll
  for (int kk = 0; kk < KS; ++kk)
#pragma unroll
    for (int r = 0; r < 4; ++r) a[kk][r] = pack_bf16(d[8 * kk + 2 * r], d[8 * kk + 2 * r + 1]);
}

struct Maps {
  CUtensorMap w, k, u, q, a, v;  // W, K (rows = tokens), UV, Q, Aqk, V (with UW); boxes of 64 rows x 64 columns
};

// A bf16 pair times two factors, rounded back to a bf16 pair.
__device__ __forceinline__ uint32_t scale_pair(uint32_t x, float2 e) {
  const float2 f = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&x));
  return pack_bf16(f.x * e.x, f.y * e.y);
}

// A chunk's outputs on the outputs' warpgroup (kOW, kWU), O^T = S^T Q^T diag(e^G) + Vn^T Aqk^T, from the stage at
// byte offset soff: S^T in its W boxes (K-major A, descriptor dw0 of stage 0), Q (K-major B, dq0), Vn in its U box
// (MN-major A, dn0), Aqk (K-major B, da0); fac[0..63] this warp's e^G. `between` runs once the first product group is
// issued.
template <class Between>
__device__ __forceinline__ void output_products(float (&O)[32], uint32_t soff, uint64_t dw0, uint64_t dq0, uint64_t dn0,
                                                uint64_t da0, const float* fac, int tq, Between&& between) {
  sm90::wgmma_fence();
#pragma unroll
  for (int ks = 0; ks < kDK / 16; ++ks) {
    const uint32_t off = soff + (ks / 4) * kBox + 32 * (ks % 4);
    sm90::wgmma_m64k16_ss<0, 0>(O, sm90::desc_advance(dw0, off), sm90::desc_advance(dq0, off), ks > 0);
  }
  sm90::wgmma_commit();
  between();
  __syncwarp();  // the factors
  sm90::wgmma_wait<0>();
  sm90::fence_regs(O);
#pragma unroll
  for (int j = 0; j < 8; ++j) {  // O^T's columns (the chunk's rows) times e^G
    const float2 e = *reinterpret_cast<const float2*>(fac + 8 * j + 2 * tq);
    O[4 * j] *= e.x, O[4 * j + 1] *= e.y, O[4 * j + 2] *= e.x, O[4 * j + 3] *= e.y;
  }
  sm90::fence_regs(O);
  sm90::wgmma_fence();
#pragma unroll
  for (int ks = 0; ks < kC / 16; ++ks)
    sm90::wgmma_m64k16_ss<1, 0>(O, sm90::desc_advance(dn0, soff + ks * 16 * 128),
                                sm90::desc_advance(da0, soff + 32 * ks), 1);
  sm90::wgmma_commit();
  sm90::wgmma_wait<0>();
  sm90::fence_regs(O);
}

// kWU's second warpgroup (walk's kWU; this warp's factors fac, as in walk). For each chunk, once its tiles have landed
// and a chunk ahead of the state's warpgroup: -W = -(A diag(beta)) diag(e^G) K, a register-A product (A diag(beta)'s
// fragments from the stage's U box, -e^G on their columns; K MN-major), stored bf16 over the stage's W boxes, then the
// formed barrier. U goes to the state's warpgroup (its X group starts with U^T = V^T (A diag(beta))^T, walk's UPROD).
// Then, once the state's warpgroup has handed the chunk's S^T and Vn over, its outputs O^T = S^T Q^T diag(e^G) + Vn^T
// Aqk^T as kOW's, staged in the first K box (read by no one once the chunk's update and W are done) for 16-byte stores,
// and the stage's release.
template <class Smem>
__device__ __forceinline__ void form_and_write(const GdnShape& s, const WalkRange& wr, unsigned char* smem,
                                               uint64_t* full, uint64_t* empty, uint64_t* hand, uint64_t* formed,
                                               const float* gst, float* fac, int64_t h, int c0, int dv,
                                               bf16* __restrict__ out) {
  constexpr int kStages = 3;
  const int tid = int(threadIdx.x) % kNT, warp = tid / 32, lane = tid % 32, tq = lane % 4, mi = lane / 8,
            mr = lane % 8;
  const uint64_t dk0 = sm90::desc_sw128(smem + Smem::k, kBox, 1024);  // K: the MN-major B of W
  const uint64_t dn0 = sm90::desc_sw128(smem + Smem::u, kBox, 1024);  // Vn: Vn^T's MN-major A
  const uint64_t dw0 = sm90::desc_sw128(smem + Smem::w, 16, 1024), dq0 = sm90::desc_sw128(smem + Smem::q, 16, 1024);
  const uint64_t da0 = sm90::desc_sw128(smem + Smem::a, 16, 1024);
  // Fragments (16-wide K slices) of this warp's 16 rows of a [64][64] SW128 box, and their stores.
  const auto frag_at = [&](int r16, int ks) { return sw128(16 * r16 + 8 * (mi % 2) + mr, 2 * ks + mi / 2); };

  auto form = [&](int c) {
    const int stage = c % kStages;
    const uint32_t soff = uint32_t(stage) * uint32_t(Smem::stage);
    unsigned char* st = smem + soff;
    sm90::mbar_wait(full + stage, uint32_t(c / kStages) & 1);
    const float* G = gst + stage * kC;
    uint32_t ab[4][4], abg[4][4];
#pragma unroll
    for (int ks = 0; ks < 4; ++ks) detail::ldmatrix_x4(ab[ks], st + Smem::u + frag_at(warp, ks));
    __syncwarp();  // this warp's reads of the last chunk's e^G (fac[kC..]) are done
    fac[kC + lane] = -__expf(G[lane]);  // -W's factors
    fac[kC + lane + 32] = -__expf(G[lane + 32]);
    __syncwarp();
#pragma unroll
    for (int ks = 0; ks < 4; ++ks) {  // columns 16 ks + 2 tq (+1) in registers 0, 1; 16 ks + 8 + 2 tq (+1) in 2, 3
      const float2 e0 = *reinterpret_cast<const float2*>(fac + kC + 16 * ks + 2 * tq);
      const float2 e1 = *reinterpret_cast<const float2*>(fac + kC + 16 * ks + 8 + 2 * tq);
      abg[ks][0] = scale_pair(ab[ks][0], e0), abg[ks][1] = scale_pair(ab[ks][1], e0);
      abg[ks][2] = scale_pair(ab[ks][2], e1), abg[ks][3] = scale_pair(ab[ks][3], e1);
    }
    float Wd[64];
    sm90::wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < kC / 16; ++ks)
      sm90::wgmma_m64n128k16_rs_mn(Wd, abg[ks], sm90::desc_advance(dk0, soff + ks * 16 * 128), ks > 0);
    sm90::wgmma_commit();
    sm90::wgmma_wait<0>();
    sm90::fence_regs(Wd);
    sm90::fence_u32(ab);
    sm90::fence_u32(abg);
    {
      uint32_t a[8][4];
      to_a<8>(a, Wd);
#pragma unroll
      for (int ks = 0; ks < kDK / 16; ++ks)
        sm90::stmatrix_x4(st + Smem::w + (ks / 4) * kBox + frag_at(warp, ks % 4), a[ks][0], a[ks][1], a[ks][2],
                          a[ks][3]);
    }
    sm90::fence_proxy_async_shared();  // W is read by the state's products
    __syncwarp();
    if (sm90::elect_one()) sm90::mbar_arrive(formed + stage);
  };

  auto outputs = [&](int c) {
    const int stage = c % kStages;
    const uint32_t soff = uint32_t(stage) * uint32_t(Smem::stage);
    unsigned char* st = smem + soff;
    sm90::mbar_wait(hand + stage, uint32_t(c / kStages) & 1);
    const float* G = gst + stage * kC;
    __syncwarp();  // this warp's reads of the last chunk's e^G (fac[0..]) are done
    fac[lane] = __expf(G[lane]);
    fac[lane + 32] = __expf(G[lane + 32]);
    float O[32];
    output_products(O, soff, dw0, dq0, dn0, da0, fac, tq, [] {});
    // O^T into this warp's 16 columns of the first K box (stored row = a chunk row), then whole 16-byte row pieces out.
    unsigned char* ob = st + Smem::k;
#pragma unroll
    for (int j = 0; j < 8; j += 2)
      sm90::stmatrix_x4_trans(ob + sw128(8 * (j + mi / 2) + mr, 2 * warp + mi % 2), pack_bf16(O[4 * j], O[4 * j + 1]),
                              pack_bf16(O[4 * j + 2], O[4 * j + 3]), pack_bf16(O[4 * j + 4], O[4 * j + 5]),
                              pack_bf16(O[4 * j + 6], O[4 * j + 7]));
    __syncwarp();
    const int L = wr.chunk_len(c);
    const int64_t ld = s.H * dv, step = 16 * ld;
    bf16* dst = out + (wr.t0(c) + lane / 2) * ld + (h * dv + c0 + 16 * warp + 8 * (lane % 2));
    const unsigned char* src = ob + sw128(lane / 2, 2 * warp + lane % 2);
    if (L == kC) {
#pragma unroll
      for (int it = 0; it < 4; ++it, dst += step)
        *reinterpret_cast<int4*>(dst) = *reinterpret_cast<const int4*>(src + it * 16 * 128);
    } else {
#pragma unroll
      for (int it = 0; it < 4; ++it, dst += step)
        if (16 * it + lane / 2 < L) *reinterpret_cast<int4*>(dst) = *reinterpret_cast<const int4*>(src + it * 16 * 128);
    }
    sm90::fence_proxy_async_shared();  // this warp's generic writes to the stage, before its bulk copies refill it
    __syncwarp();
    if (sm90::elect_one()) sm90::mbar_arrive(empty + stage);  // this warp is done with the stage
  };

  if (wr.nchunks > 0) form(0);
  for (int c = 0; c < wr.nchunks; ++c) {
    if (c + 1 < wr.nchunks) form(c + 1);
    outputs(c);
  }
}

// One block's walk. OUTS (a state block of a launch with outputs) is a template parameter: ptxas counts the
// product groups a wait leaves pending only along straight-line code, and with a run-time choice of waits it
// serialises every product. So are NEG (the workspace holds -W: plan_u_in_walk) and UPROD (NEG, and this state
// block forms U^T = V^T (A diag(beta))^T in X's registers before X accumulates S^T (-W)^T, leaving Vn^T there).
// kWG warpgroups a block (Smem): warpgroup i walks the block's columns 64 i .. 64 i + 63. kUnroll: the chunk loop
// unrolled by the stages (unroll_walk). kOW (with OUTS, one warpgroup's columns, three stages): the block's second
// warpgroup writes the outputs. The first walks the state; at the end of each chunk it leaves S^T (the chunk's start
// state, bf16) in the stage's W boxes and Vn in its U box (both read no more by then) and arrives on the stage's
// hand-over barrier; the second forms O^T = S^T Q^T diag(e^G) + Vn^T Aqk^T from them while the first walks on, and
// releases the stage on its empty barrier. The state's chain of products then carries none of the outputs' products,
// waits or stores.
template <bool OUTS, int kStages, bool NEG = false, bool UPROD = false, int kWG = 1, bool kUnroll = false,
          bool kOW = false, bool kWU = false, bool kFormedEarly = false>
__device__ __forceinline__ void walk(const Maps& maps, const GdnShape& s, const int32_t* __restrict__ cu, float* state,
                                     float* transfer, const Workspace& w, bf16* __restrict__ out) {
#if HYPIC_SM90A
  static_assert(NEG || !UPROD, "U is formed in the walk only with -W in the workspace");
  static_assert(kWG == 1 || !NEG, "U formed in the walk takes one warpgroup a block");
  static_assert(!kOW || (OUTS && kWG == 1 && (!NEG || kWU) && kStages == 3),
                "the outputs' warpgroup: one state warpgroup");
  static_assert(!kWU || (kOW && !kUnroll && UPROD), "W formed on the outputs' warpgroup, U in the state's X group");
  using Smem = gdn::Smem<kStages, NEG || kWU, kWG, kOW, kWU>;
  constexpr bool kRing = Smem::ring;
  constexpr bool kGTile = Smem::gtile;  // a chunk's G comes with its tiles (a bulk copy into the stage's G)
  constexpr bool kOutHere = OUTS && !kOW;  // this warpgroup forms the outputs too
  const int role = kOW ? int(threadIdx.x) / kNT : 0;  // with kOW: 0 walks the state, 1 writes the outputs
  const bool beside = w.ready != nullptr;  // gdn_prep runs beside the walk: wait for each chunk's ready flag
  extern __shared__ unsigned char smem_raw[];
  unsigned char* smem = smem_raw + ((1024 - (sm90::smem_u32(smem_raw) & 1023)) & 1023);
  const int wg = kWG > 1 ? int(threadIdx.x) / kNT : 0;
  bf16* Ost = reinterpret_cast<bf16*>(smem + Smem::o) + wg * kC * kLdO;
  uint64_t* full = reinterpret_cast<uint64_t*>(smem + Smem::bar);
  uint64_t* ufull = full + kStages;  // the ring's
  uint64_t* empty = ufull + 2;       // with the ring: a stage released by every warp of the block
  uint64_t* uempty = empty + kStages;  // a ring slot's
  uint64_t* hand = uempty + 2;         // kOW: a stage's S^T and Vn are in place
  uint64_t* formed = hand + kStages;   // kWU: a stage's -W is formed
  float* gst = reinterpret_cast<float*>(smem + Smem::g);

  const int64_t n = blockIdx.z, h = blockIdx.y;
  const int64_t H = s.H, kh = h / (s.H / s.Hk);
  const int dv = int(s.dv);
  const int nsb = dv / (kCols * kWG);
  const bool is_T = int(blockIdx.x) >= nsb;  // a block of transfer-operator columns: U = 0, no outputs
  const int cb = (is_T ? int(blockIdx.x) - nsb : int(blockIdx.x)) * kCols * kWG;  // the block's first column
  const int c0 = cb + kCols * wg;                                                  // this warpgroup's
  const int width = is_T ? kDK : dv;
  float* M = is_T ? transfer + (n * H + h) * kDK * kDK : state + (n * H + h) * kDK * dv;
  // tid and warp within the warpgroup (the products' fragment layouts); bw the block's warp (warp 0 issues the copies,
  // thread 0 reads the flags).
  const int tid = int(threadIdx.x) % kNT, bw = int(threadIdx.x) / 32, warp = bw % 4, lane = tid % 32, gq = lane / 4,
            tq = lane % 4;
  const bool t0 = threadIdx.x == 0;
  const int m0 = 16 * warp + gq;  // this thread's block columns m0 and m0 + 8
  float* fac = reinterpret_cast<float*>(smem + Smem::fac) + bw * 2 * kC;

  if (t0) {
    for (int i = 0; i < Smem::nbar; ++i) sm90::mbar_init(full + i, i < kStages + 2 ? 1 : 4 * kWG);
    sm90::mbar_fence_init();
  }
  // S[4 j + e] = S^T(m0 + 8 (e / 2), dk row 8 j + 2 tq + e % 2).
  float S[64];
  if (role == 0) {
#pragma unroll
    for (int j = 0; j < 16; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) S[4 * j + e] = M[int64_t(8 * j + 2 * tq + e % 2) * width + c0 + m0 + 8 * (e / 2)];
  }
  __syncthreads();  // the barriers are initialised
  // With kOW the warpgroups part here: the state's barriers below are its own (barrier 1).
  const auto wg_sync = [&]() {
    if constexpr (kOW)
      sm90::named_barrier(1, kNT);
    else
      __syncthreads();
  };

  const WalkRange wr = walk_range(s, cu, n, h, w, nullptr, false, is_T);
  // Chunk c's tiles into stage c % kStages by bulk tensor copies from warp 0 (K and Q rows past the sequence are
  // the next one's or zero: they meet zero decay factors, zero Aqk columns, and outputs that are not stored).
  volatile int32_t* flag = reinterpret_cast<volatile int32_t*>(smem + Smem::flag);  // thread 0's
  if (beside && t0) *flag = 0;
  // Thread 0 sees chunk c's ready flag (as copied a chunk ahead, ready_spin) in chunk c - 2: before c's tiles are
  // issued (there with three stages, in chunk c - 1 with two) and before chunk c - 1's block barrier, after which
  // every thread reads c's G (with the ring, G comes with the tiles).
  auto await_ready = [&](int c) {
    if (!beside || !t0 || c >= wr.nchunks) return;
    cp_async_wait_all();
    if (*flag == 0) ready_spin(w.ready + kReadyStride * (wr.tile0 + c));
    ready_fence();
    if (c + 1 < wr.nchunks) {
      cp_async16(const_cast<int32_t*>(flag), w.ready + kReadyStride * (wr.tile0 + c + 1), true);
      cp_async_commit();
    }
  };
  auto issue = [&](int c) {
    if (bw != 0 || c >= wr.nchunks) return;
    // Warp 0 forms the coordinates (warp-uniform: uniform registers) and one elected lane issues. Formed and issued
    // by thread 0 alone, in a divergent branch, every coordinate went into uniform registers by a loop over the active
    // lanes, ~12 instructions a copy, and warp 0 (which issues the most) paces the warpgroup's products.
    unsigned char* st = smem + (c % kStages) * Smem::stage;
    uint64_t* bar = full + c % kStages;
    const int row = int((wr.tile0 + c) * kC), tok = int(wr.t0(c));
    // kWU: K, Q, A diag(beta), V, Aqk and G (no W, no U).
    const uint32_t bytes = kWU ? uint32_t(7 * kBox + kC * 4)
                               : uint32_t(4 * kBox + (is_T || kRing ? 0 : kBox) + (OUTS ? 3 * kBox : 0) +
                                          (UPROD ? kBox : 0) + (kRing ? kC * 4 : 0));
    if ((kRing || kOW) && c >= kStages) sm90::mbar_wait(empty + c % kStages, uint32_t(c / kStages - 1) & 1);  // c - 3's
    // Thread 0 saw chunk c's flag (await_ready); the warp barrier orders that before the elected lane's bulk copies,
    // which it fences from its own earlier generic accesses as thread 0 did.
    __syncwarp();
    if (!sm90::elect_one()) return;
    if (beside) ready_fence();
    sm90::mbar_arrive_expect_tx(bar, bytes);
    for (int half = 0; half < 2; ++half) {
      if (!kWU) sm90::tma_load_2d(st + Smem::w + half * kBox, &maps.w, 64 * half, row, bar);
      sm90::tma_load_2d(st + Smem::k + half * kBox, &maps.k, int(kh) * kDK + 64 * half, tok, bar);
      if (OUTS) sm90::tma_load_2d(st + Smem::q + half * kBox, &maps.q, int(kh) * kDK + 64 * half, tok, bar);
    }
    if (!is_T && !kRing) sm90::tma_load_2d(st + Smem::u, &maps.u, UPROD ? 0 : c0, row, bar);
    if (UPROD) sm90::tma_load_2d(st + Smem::v, &maps.v, int(h) * dv + c0, tok, bar);
    if (OUTS) sm90::tma_load_2d(st + Smem::a, &maps.a, 0, row, bar);
    if (kGTile) sm90::bulk_load(gst + (c % kStages) * kC, w.G + (wr.tile0 + c) * kC, kC * 4, bar);
  };
  // With the ring: chunk c's U boxes (every warpgroup's) into slot c % 2, once every warp has read chunk c - 2's
  // and thread 0 has seen chunk c's flag.
  auto issue_u = [&](int c) {
    if (!kRing || is_T || bw != 0 || c >= wr.nchunks) return;
    if (c >= 2) sm90::mbar_wait(uempty + c % 2, uint32_t(c / 2 - 1) & 1);  // chunk c - 2's U read by every warp
    __syncwarp();
    if (!sm90::elect_one()) return;
    if (beside) ready_fence();
    uint64_t* bar = ufull + c % 2;
    const int row = int((wr.tile0 + c) * kC);
    sm90::mbar_arrive_expect_tx(bar, uint32_t(kWG * kBox));
    for (int i = 0; i < kWG; ++i)
      sm90::tma_load_2d(smem + Smem::uring + (c % 2) * kWG * kBox + i * kBox, &maps.u, cb + kCols * i, row, bar);
  };
  if (t0) {
    sm90::prefetch_tensor_map(&maps.w);
    sm90::prefetch_tensor_map(&maps.k);
  }
  await_ready(0);
  await_ready(1);
  for (int c = 0; c + 1 < kStages; ++c) issue(c);
  issue_u(0);
  // G of chunk 0 is read below by every thread of the state's warpgroup: after thread 0 saw its flag.
  if (beside && !kGTile && role == 0) wg_sync();
  // The chunk's G (lane l: rows l and l + 32) and G_L, read from global memory a chunk ahead (from L2: with gdn_prep
  // beside the walk, another SM wrote it during this launch; a block barrier orders the read after thread 0 saw the
  // chunk's flag).
  auto load_g = [&](int c, float& g0, float& g1, float& gl) {
    if (!kGTile && c < wr.nchunks) {
      const float* G = w.G + (wr.tile0 + c) * kC;
      g0 = __ldcg(G + lane), g1 = __ldcg(G + lane + 32), gl = __ldcg(G + wr.chunk_len(c) - 1);
    }
  };
  float g0 = 0.0f, g1 = 0.0f, gl = 0.0f;
  if (role == 0) load_g(0, g0, g1, gl);

  // The outputs of chunk c - 1 (O^T in registers) to global memory: through this warp's 16 columns of Ost
  // (stmatrix.trans: stored row = a chunk row), then 16-byte stores of whole 32-byte row pieces.
  float O[32];
  auto stage_out = [&]() {
    const int mi = lane / 8, mr = lane % 8;
    __syncwarp();  // the last chunk's reads of this warp's Ost columns are done
#pragma unroll
    for (int j = 0; j < 8; j += 2)
      sm90::stmatrix_x4_trans(Ost + (8 * (j + mi / 2) + mr) * kLdO + 16 * warp + 8 * (mi % 2),
                              pack_bf16(O[4 * j], O[4 * j + 1]), pack_bf16(O[4 * j + 2], O[4 * j + 3]),
                              pack_bf16(O[4 * j + 4], O[4 * j + 5]), pack_bf16(O[4 * j + 6], O[4 * j + 7]));
  };
  // O^T's columns (the chunk's rows) times e^G, this warp's factors.
  auto scale_o = [&]() {
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const float2 e = *reinterpret_cast<const float2*>(fac + 8 * j + 2 * tq);
      O[4 * j] *= e.x, O[4 * j + 1] *= e.y, O[4 * j + 2] *= e.x, O[4 * j + 3] *= e.y;
    }
  };
  // One 64-bit index for this lane's first row piece and a 16-row step, where each of the four stores computed its own
  // ((t0 + r) H + h) dv: the walk issues an instruction every few cycles at best, and that arithmetic was ~40 of them a
  // warp and chunk.
  auto write_out = [&](int c) {
    __syncwarp();
    const int L = wr.chunk_len(c);
    const int64_t ld = H * dv;
    bf16* dst = out + (wr.t0(c) + lane / 2) * ld + (h * dv + c0 + 16 * warp + 8 * (lane % 2));
    const bf16* src = Ost + (lane / 2) * kLdO + 16 * warp + 8 * (lane % 2);
    const int64_t step = 16 * ld;
    if (L == kC) {  // every chunk but a sequence's last: no per-store branch for the compiler to recompute indices in
#pragma unroll
      for (int it = 0; it < 4; ++it, dst += step)
        *reinterpret_cast<int4*>(dst) = *reinterpret_cast<const int4*>(src + 16 * it * kLdO);
    } else {
#pragma unroll
      for (int it = 0; it < 4; ++it, dst += step)
        if (16 * it + lane / 2 < L) *reinterpret_cast<int4*>(dst) = *reinterpret_cast<const int4*>(src + 16 * it * kLdO);
    }
  };

  // The products' shared-memory descriptors of stage 0 (every other stage and K slice is a constant byte offset
  // on the low word: one add, where building each from its address took a handful of uniform instructions).
  const uint64_t dw0 = sm90::desc_sw128(smem + Smem::w, 16, 1024), dk0 = sm90::desc_sw128(smem + Smem::k, kBox, 1024);
  const uint64_t dq0 = sm90::desc_sw128(smem + Smem::q, 16, 1024), da0 = sm90::desc_sw128(smem + Smem::a, 16, 1024);
  // With UPROD: V (MN-major A of V^T) and A diag(beta) (K-major B).
  const uint64_t dv0 = sm90::desc_sw128(smem + Smem::v, kBox, 1024), du0 = sm90::desc_sw128(smem + Smem::u, 16, 1024);
  if constexpr (kWU) {
    if (role == 1) {
      form_and_write<Smem>(s, wr, smem, full, empty, hand, formed, gst, fac, h, c0, dv, out);
      return;
    }
  } else if constexpr (kOW) {
    if (role == 1) {
      // The outputs' warpgroup: chunk c's O^T once the state's warpgroup has handed over S^T (in W's place, the K-major
      // A of S^T Q^T) and Vn (in U's place, the MN-major A of Vn^T Aqk^T); Q and Aqk came with the stage. G is read a
      // chunk ahead: thread 0 saw chunk c + 1's flag before the state's warpgroup began chunk c, whose hand-over
      // orders the read after it.
      const uint64_t dn0 = sm90::desc_sw128(smem + Smem::u, kBox, 1024);
      float ga = 0.0f, gb = 0.0f;
      for (int c = 0; c < wr.nchunks; ++c) {
        const int stage = c % kStages;
        const uint32_t soff = uint32_t(stage) * uint32_t(Smem::stage), par = uint32_t(c / kStages) & 1;
        sm90::mbar_wait(full + stage, par);
        sm90::mbar_wait(hand + stage, par);
        if (c == 0) {
          const float* G = w.G + wr.tile0 * kC;
          ga = __ldcg(G + lane), gb = __ldcg(G + lane + 32);
        }
        __syncwarp();  // this warp's reads of the last chunk's factors are done
        fac[lane] = __expf(ga);
        fac[lane + 32] = __expf(gb);
        if (c + 1 < wr.nchunks) {
          const float* G = w.G + (wr.tile0 + c + 1) * kC;
          ga = __ldcg(G + lane), gb = __ldcg(G + lane + 32);
        }
        if (c > 0) stage_out();
        output_products(O, soff, dw0, dq0, dn0, da0, fac, tq, [&] {
          if (c > 0) write_out(c - 1);
        });
        __syncwarp();
        if (sm90::elect_one()) sm90::mbar_arrive(empty + stage);  // this warp is done with the stage
      }
      if (wr.nchunks > 0) {
        stage_out();
        write_out(wr.nchunks - 1);
      }
      return;
    }
  }
  // One chunk: c, and its stage c % kStages as an int or (kUnroll) a compile-time constant.
  auto chunk = [&](const int c, const auto stage_of_c) {
    const int stage = int(stage_of_c);
    const uint32_t soff = uint32_t(stage) * uint32_t(Smem::stage);
    unsigned char* st = smem + soff;
    const uint64_t dw = sm90::desc_advance(dw0, soff), dk = sm90::desc_advance(dk0, soff);
    // S's bf16 copy, the A of this chunk's products; then its decay, and the last chunk's outputs to Ost. ptxas
    // tracks registers written by a product only up to the loop's back edge: touching S or O once this chunk's
    // products are in flight would make it wait for them all, so both happen here.
    uint32_t aS[8][4];
    to_a<8>(aS, S);
    if (!kGTile) {
      const float decay = __expf(gl);
#pragma unroll
      for (int i = 0; i < 64; ++i) S[i] *= decay;
      sm90::fence_regs(S);  // here, not sunk past the products' issue
    }
    if (kOutHere && c > 0) stage_out();
    // The chunk's decay factors, this warp's copy.
    auto factors = [&]() {
      const int L = wr.chunk_len(c);
      fac[lane] = __expf(g0);
      fac[lane + 32] = __expf(g1);
      fac[kC + lane] = lane < L ? __expf(gl - g0) : 0.0f;
      fac[kC + lane + 32] = lane + 32 < L ? __expf(gl - g1) : 0.0f;
    };
    if (!kGTile) {
      factors();
      // Chunk c - 1's stage is read by no one of this warpgroup (its products were waited for): reloaded below (with
      // kOW, once the outputs' warpgroup released it too).
      wg_sync();
    }
    sm90::mbar_wait(full + stage, uint32_t(c / kStages) & 1);  // chunk c's tiles (with the ring or kWU, and G)
    if (kWU && kFormedEarly) sm90::mbar_wait(formed + stage, uint32_t(c / kStages) & 1);  // and its -W
    if (kGTile) {
      const float* G = gst + stage * kC;
      g0 = G[lane], g1 = G[lane + 32], gl = G[wr.chunk_len(c) - 1];
      const float decay = __expf(gl);
#pragma unroll
      for (int i = 0; i < 64; ++i) S[i] *= decay;
      sm90::fence_regs(S);
      factors();  // the last chunk's reads of them were before its final warp barrier
      __syncwarp();
    }

    // X = S^T W^T (with NEG: S^T (-W)^T, after UPROD's U^T = V^T (A diag(beta))^T: then X = Vn^T)
    float X[32];
    sm90::wgmma_fence();
    if (UPROD) {
#pragma unroll
      for (int ks = 0; ks < kC / 16; ++ks)
        sm90::wgmma_m64k16_ss<1, 0>(X, sm90::desc_advance(dv0, soff + ks * 16 * 128),
                                    sm90::desc_advance(du0, soff + 32 * ks), ks > 0);
    }
    // -W, once U^T's products (which need only the tiles) are issued: they run while the second warpgroup forms it.
    if (kWU && !kFormedEarly) sm90::mbar_wait(formed + stage, uint32_t(c / kStages) & 1);
#pragma unroll
    for (int ks = 0; ks < kDK / 16; ++ks)
      sm90::wgmma_m64n64k16_rs(X, aS[ks], sm90::desc_advance(dw, (ks / 4) * kBox + 32 * (ks % 4)), UPROD || ks > 0);
    sm90::wgmma_commit();
    issue_u(c + 1);  // into chunk c - 1's slot, once every warp has read it

    // While X runs: U^T's fragments, the last chunk's outputs.
    uint32_t uf[8][2];  // uf[j][hh]: U^T(m0 + 8 hh, rows 8 j + 2 tq, + 1)
    if (!NEG && !is_T) {
      const unsigned char* Us = st + Smem::u;
      if (kRing) {
        Us = smem + Smem::uring + (c % 2) * kWG * kBox + wg * kBox;
        sm90::mbar_wait(ufull + c % 2, uint32_t(c / 2) & 1);
      }
      const int mi = lane / 8, mr = lane % 8;
#pragma unroll
      for (int j = 0; j < 8; j += 2) {
        uint32_t r4[4];
        detail::ldmatrix_x4_trans(r4, Us + sw128(8 * (j + mi / 2) + mr, 2 * warp + mi % 2));
        uf[j][0] = r4[0], uf[j][1] = r4[1], uf[j + 1][0] = r4[2], uf[j + 1][1] = r4[3];
      }
      if (kRing) {  // this warp's release of the slot
        __syncwarp();
        if (sm90::elect_one()) sm90::mbar_arrive(uempty + c % 2);
      }
    }
    if (kOutHere && c > 0) write_out(c - 1);
    sm90::wgmma_wait<0>();
    sm90::fence_regs(X);
    if (!kOutHere) sm90::fence_u32(aS);

    // Vn^T = U^T - X (with NEG: X), Vd^T = Vn^T diag(e^{G_L - G_j}): the A operands of the update and of Aqk Vn.
    uint32_t aVd[4][4], aVn[4][4];
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const float2 dj = *reinterpret_cast<const float2*>(fac + kC + 8 * j + 2 * tq);
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        float u0 = 0.0f, u1 = 0.0f;
        if (!NEG && !is_T) {
          const float2 uu = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&uf[j][hh]));
          u0 = uu.x, u1 = uu.y;
        }
        const float v0 = NEG ? X[4 * j + 2 * hh] : u0 - X[4 * j + 2 * hh];
        const float v1 = NEG ? X[4 * j + 2 * hh + 1] : u1 - X[4 * j + 2 * hh + 1];
        // slice j / 2, register 2 (j % 2) + hh of the A fragment
        aVd[j / 2][2 * (j % 2) + hh] = pack_bf16(v0 * dj.x, v1 * dj.y);
        if (OUTS) aVn[j / 2][2 * (j % 2) + hh] = pack_bf16(v0, v1);
      }
    }
    // S^T = e^{G_L} S^T + Vd^T K
    sm90::fence_regs(S);
    sm90::wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < kC / 16; ++ks)
      sm90::wgmma_m64n128k16_rs_mn(S, aVd[ks], sm90::desc_advance(dk, ks * 16 * 128));
    sm90::wgmma_commit();
    if (kOW) {
      // Vn over U, where this warp read U^T (its 16 columns, every row; no other warp reads them): for the outputs'
      // warpgroup, the MN-major A of Vn^T Aqk^T.
      const int mi = lane / 8, mr = lane % 8;
#pragma unroll
      for (int j = 0; j < 8; j += 2)
        sm90::stmatrix_x4_trans(st + Smem::u + sw128(8 * (j + mi / 2) + mr, 2 * warp + mi % 2), aVn[j / 2][0],
                                aVn[j / 2][1], aVn[j / 2][2], aVn[j / 2][3]);
    }

    if (kOutHere) {
      // O = diag(e^G) (Q S) + Aqk Vn, transposed: Q S behind the update (in the registers X had: issued beside X, it
      // would keep them and S's bf16 copy live through the elementwise step, past the register file), then scale
      // its columns and accumulate Vn^T Aqk^T.
      sm90::wgmma_fence();
#pragma unroll
      for (int ks = 0; ks < kDK / 16; ++ks)
        sm90::wgmma_m64n64k16_rs(O, aS[ks], sm90::desc_advance(dq0, soff + (ks / 4) * kBox + 32 * (ks % 4)), ks > 0);
      sm90::wgmma_commit();
    }
    // While the tensor cores run: chunk c + kStages - 1's tiles (into chunk c - 1's stage; here rather than at the barrier,
    // where warp 0's copies would hold it up and so every warp's products) and chunk c + 1's G.
    await_ready(c + 2);
    issue(c + kStages - 1);
    load_g(c + 1, g0, g1, gl);
    if (kOutHere) {
      sm90::wgmma_wait<0>();  // Q S (the update, ahead of it, too)
      sm90::fence_regs(O);
      sm90::fence_regs(S);
      sm90::fence_u32(aS);
      scale_o();
      sm90::fence_regs(O);
      sm90::wgmma_fence();
#pragma unroll
      for (int ks = 0; ks < kC / 16; ++ks)
        sm90::wgmma_m64n64k16_rs(O, aVn[ks], sm90::desc_advance(da0, soff + 32 * ks), 1);
      sm90::wgmma_commit();
    }
    // Nothing is left in flight across the loop's back edge (ptxas serialises every product otherwise): the update
    // is the next chunk's first need anyway, and Aqk Vn reads the stage that the next chunk reloads.
    sm90::wgmma_wait<0>();
    sm90::fence_regs(S);
    sm90::fence_regs(O);
    sm90::fence_u32(aVd);
    if (kOutHere) sm90::fence_u32(aVn);
    if (kOW) {
      // S^T (the chunk's start state, bf16) over W, in W's layout: the K-major A of S^T Q^T. Every warp's X has
      // completed (this warp's update did, and the update starts only once every warp has issued it, after its wait
      // for X). Then the hand-over: the generic stores, before the outputs' products read them.
      const int mi = lane / 8, mr = lane % 8;
#pragma unroll
      for (int ks = 0; ks < kDK / 16; ++ks)
        sm90::stmatrix_x4(st + Smem::w + (ks / 4) * kBox + sw128(16 * warp + 8 * (mi % 2) + mr, 2 * (ks % 4) + mi / 2),
                          aS[ks][0], aS[ks][1], aS[ks][2], aS[ks][3]);
      sm90::fence_proxy_async_shared();
      __syncwarp();
      if (sm90::elect_one()) sm90::mbar_arrive(hand + stage);
    }
    if (kRing) {  // this warp's release of the stage
      __syncwarp();
      if (sm90::elect_one()) sm90::mbar_arrive(empty + stage);
    }
  };
  if constexpr (kUnroll) {
    // One copy of the chunk a stage, so that each copy's stage offset is a constant and the products' descriptors
    // stay on the uniform datapath (the loop counter is per thread: its trip count is loaded from cu).
    for (int cc = 0; cc < wr.nchunks; cc += kStages) {
      chunk(cc, std::integral_constant<int, 0>{});
      if (cc + 1 >= wr.nchunks) break;
      chunk(cc + 1, std::integral_constant<int, 1>{});
      if constexpr (kStages > 2) {
        if (cc + 2 >= wr.nchunks) break;
        chunk(cc + 2, std::integral_constant<int, 2>{});
      }
    }
  } else {
    for (int c = 0; c < wr.nchunks; ++c) chunk(c, c % kStages);
  }
  if (kOutHere && wr.nchunks > 0) {
    stage_out();
    write_out(wr.nchunks - 1);
  }
#pragma unroll
  for (int j = 0; j < 16; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) M[int64_t(8 * j + 2 * tq + e % 2) * width + c0 + m0 + 8 * (e / 2)] = S[4 * j + e];
#endif
}

// kOW: outputs on a second warpgroup (every block a state block with outputs: launched only without T); kWU (with
// kOW): -W formed there too, and U in the state's X group.
template <int kStages, bool UW, int kWG = 1, bool kUnroll = false, bool kOW = false, bool kWU = false,
          bool kFormedEarly = false>
__global__ void __launch_bounds__(kNT * (kOW ? 2 : kWG), 1)
    gdn_walk_rs_kernel(const __grid_constant__ Maps maps, GdnShape s, const int32_t* __restrict__ cu, float* state,
                       float* transfer, Workspace w, bf16* __restrict__ out) {
  if constexpr (kOW) {
    walk<true, kStages, kWU, kWU, 1, kUnroll, true, kWU, kFormedEarly>(maps, s, cu, state, transfer, w, out);
  } else {
    const bool is_T = int(blockIdx.x) >= int(s.dv) / (kCols * kWG);
    if (out != nullptr && !is_T)
      walk<true, kStages, UW, UW, kWG, kUnroll>(maps, s, cu, state, transfer, w, out);
    else if (UW && !is_T)
      walk<false, kStages, UW, UW, kWG, kUnroll>(maps, s, cu, state, transfer, w, out);
    else
      walk<false, kStages, UW, false, kWG, kUnroll>(maps, s, cu, state, transfer, w, out);
  }
}

// Blocks a head: its state's blocks of 64 wg columns, then T's.
int64_t blocks_per_head(const GdnShape& s, bool transfer, int wg) {
  return s.dv / (kCols * wg) + (transfer ? kDK / (kCols * wg) : 0);
}

// Two warpgroups a block (the state's and T's 128 columns a block, sharing their W, K, Q and Aqk tiles) where dv is a
// multiple of 128. Unset or HYPIC_CUDA_GDN_WALK_PAIR=auto: where blocks of one warpgroup would be more than the SMs
// (several sequences, or many heads with T; H100, 16 sequences of 2k: 1.024 -> 0.961 ms, 1.226 -> 1.094 ms with T),
// and beside prep for a long sequence with T (warpgroups()); =1 beside gdn_prep; =all in every launch of the walk; =0, never.
enum class Pair { kNever, kAuto, kBeside, kAll };
Pair pair_mode() {
  static const Pair m = env_is("HYPIC_CUDA_GDN_WALK_PAIR", "all")  ? Pair::kAll
                        : env_is("HYPIC_CUDA_GDN_WALK_PAIR", "1")  ? Pair::kBeside
                        : env_is("HYPIC_CUDA_GDN_WALK_PAIR", "0")  ? Pair::kNever
                                                                    : Pair::kAuto;
  return m;
}

// HYPIC_CUDA_GDN_OVERLAP_STAGES=2: the walk beside gdn_prep keeps two chunks of tiles in flight instead of three.
bool two_stages_beside() {
  static const bool on = env_is("HYPIC_CUDA_GDN_OVERLAP_STAGES", "2");
  return on;
}

// Tokens a sequence from which a launch that builds T walks on two-warpgroup blocks beside prep where one-warpgroup
// blocks would leave prep no SMs (H100, 32 heads, one sequence, with the loop unrolled: 8k 0.345 -> 0.350 ms, 16k
// 0.665 -> 0.653, 24k 0.995 -> 0.953, 32k 1.326 -> 1.252).
constexpr int64_t kPairBesideTokens = 16384;

// The launch's warpgroups a block: one for U (or W and U) formed in the walk and for the two-stage walk beside prep (so
// a batch of sequences without T, which forms W and U in the walk by default, takes one-warpgroup blocks). A block
// of two walks twice the columns in ~1.13x the chunk time of a block of one (H100, docs/cuda_kernels.md), and each
// takes a whole SM: so with =auto, two where one-warpgroup blocks would need more than one wave of the SMs, and for
// long sequences with T where only half as many blocks let prep run beside the walk (overlap_applies asks with
// beside).
int warpgroups(const GdnShape& s, const Workspace& w, bool transfer, bool beside) {
  if (s.dv % (2 * kCols) != 0 || w.V != nullptr || (beside && two_stages_beside())) return 1;
  switch (pair_mode()) {
    case Pair::kNever: return 1;
    case Pair::kAll: return 2;
    case Pair::kBeside: return beside ? 2 : 1;
    case Pair::kAuto: break;
  }
  const int64_t one = blocks_per_head(s, transfer, 1) * s.H * s.N, sms = detail::device_sm_count();
  if (one > sms) return 2;
  return beside && transfer && 2 * one > sms && s.T >= kPairBesideTokens * s.N ? 2 : 1;
}

// The three-stage walk with its loop unrolled by the stages (kUnroll: the products' descriptors on the uniform
// datapath, three times the loop's code). Measured on an H100: faster where the walk runs alone (prep before it: 8k
// 0.354 -> 0.342 ms, 32k 1.389 -> 1.306; with T, 0.349 -> 0.345, 1.396 -> 1.326), slower beside prep (0.294 ->
// 0.305, 1.14 -> 1.18; why is not known). Unset: one-warpgroup walks that do not run beside prep, and two-warpgroup
// walks beside prep with T (32k 1.303 -> 1.252 ms, 8k 0.353 -> 0.350); HYPIC_CUDA_GDN_WALK_UNROLL=1 in every
// three-stage launch; =0 never.
enum class Unroll { kNever, kDefault, kAlways };
Unroll unroll_mode() {
  static const Unroll m = env_is("HYPIC_CUDA_GDN_WALK_UNROLL", "1")   ? Unroll::kAlways
                          : env_is("HYPIC_CUDA_GDN_WALK_UNROLL", "0") ? Unroll::kNever
                                                                      : Unroll::kDefault;
  return m;
}
// kWG warpgroups a block, beside prep or not, the launch building T or not.
bool unroll_walk(int kwg, bool beside, bool transfer) {
  switch (unroll_mode()) {
    case Unroll::kNever: return false;
    case Unroll::kAlways: return true;
    case Unroll::kDefault: break;
  }
  return kwg == 1 ? !beside : beside && transfer;
}

// Whether a one-warpgroup, three-stage walk that writes the outputs and builds no T gives the outputs a warpgroup of
// their own (walk's kOW). Measured on an H100 (32 heads, one sequence, docs/cuda_kernels.md): beside prep 2-3% faster
// (8k 0.296 -> 0.289 ms, 32k 1.122 -> 1.084); alone, after prep, no faster (8k 0.321 -> 0.318, 32k 1.292 -> 1.304).
// Unset: beside prep; HYPIC_CUDA_GDN_OUT_WG=1 wherever it applies; =0 never.
bool out_wg(bool beside) {
  static const int m = env_is("HYPIC_CUDA_GDN_OUT_WG", "1") ? 1 : env_is("HYPIC_CUDA_GDN_OUT_WG", "0") ? 0 : -1;
  return m == 1 || (m == -1 && beside);
}

// HYPIC_CUDA_GDN_WU_FORMED_EARLY=1: with W formed in the walk, the state's warpgroup waits for -W before issuing
// U^T's products, as measured in callE / callF, instead of after (A/B runs).
bool formed_early() {
  static const bool on = env_is("HYPIC_CUDA_GDN_WU_FORMED_EARLY", "1");
  return on;
}

// HYPIC_CUDA_GDN_RS=0: the walks keep gdn_state_sm90.cu's form (A/B runs).
bool rs_enabled() {
  static const bool on = !env_is("HYPIC_CUDA_GDN_RS", "0");
  return on;
}

}  // namespace

bool walk_rs_applies(const GdnShape& s, const Workspace& w, const bf16* k, bool want_out, const bf16* q,
                     const bf16* out) {
  const auto a16 = [](const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; };
  const bool outs_ok = out != nullptr ? (w.Aqk != nullptr && q != nullptr && a16(q) && a16(out)) : !want_out;
  // The bulk copies' row coordinates are 32-bit: workspace rows and tokens past 2^31 take the other walk.
  const bool rows_ok = s.H * w.slots * kC < (int64_t{1} << 31) && s.T < (int64_t{1} << 31);
  // The 64-column Hopper walk's conditions (dk 128, dv a multiple of 64, aligned keys, an sm_90 device) are this
  // walk's too.
  return rs_enabled() && outs_ok && rows_ok && state_sm90_applies(s, w, k, kCols);
}

bool plan_u_in_walk(const GdnShape& s, Workspace& w, const bf16* q, const bf16* k, const bf16* v, const bf16* out,
                    bool fused) {
  static const bool on = env_is("HYPIC_CUDA_GDN_U_IN_WALK", "1");
  if (!on || v == nullptr || (reinterpret_cast<uintptr_t>(v) & 15) != 0 || (s.H * s.dv) % 8 != 0) return false;
  // launch_state's arguments (the walk gets q and out only when it writes the outputs), launch_prep's q.
  if (!walk_rs_applies(s, w, k, out != nullptr, fused ? q : nullptr, fused ? out : nullptr)) return false;
  if (!prep_sm90_fits(s, q, k, v, w)) return false;
  w.V = v;
  return true;
}

// W and U formed in the walk: prep's traffic falls by W's and U's round trip through memory (and V's read); the walk's
// second warpgroup takes on -W's product a chunk and the state's warpgroup U^T's four k-slices at the head of X.
// Measured on an H100, 32 heads (docs/cuda_kernels.md), against prep forming them, faster wherever it applies: where
// blocks of one warpgroup are more than the SMs (several sequences, which otherwise walk on two-warpgroup blocks after
// prep) 16 x 512 tokens 0.2533 -> 0.2424-0.2431 ms, 16 x 2k 0.8234 -> 0.7995-0.7999; one sequence beside prep 1k-32k
// 1-6% (8k 0.2861-0.2883 -> 0.2794-0.2834, 32k 1.0552-1.0562 -> 0.9993-1.0003); two sequences, prep first, 15-27%
// (2 x 512 0.0480 -> 0.0349, 2 x 8k 0.4749 -> 0.4021). (A first form that left U on the second warpgroup too was
// slower for one sequence below 32k and with prep first: that warpgroup then set the pace.) HYPIC_CUDA_GDN_WU_IN_WALK=0:
// never (prep forms W and U).
bool plan_wu_in_walk(const GdnShape& s, Workspace& w, const bf16* q, const bf16* k, const bf16* v, const bf16* out,
                     bool fused, bool transfer) {
  static const bool off = env_is("HYPIC_CUDA_GDN_WU_IN_WALK", "0");
  if (off || !fused || out == nullptr || transfer || v == nullptr || (reinterpret_cast<uintptr_t>(v) & 15) != 0 ||
      (s.H * s.dv) % 8 != 0)
    return false;
  if (!walk_rs_applies(s, w, k, true, q, out) || !prep_sm90_fits(s, q, k, v, w)) return false;
  w.V = v;
  w.wu = true;
  return true;
}

int64_t walk_rs_blocks(const GdnShape& s, const Workspace& w, bool transfer, bool beside) {
  return blocks_per_head(s, transfer, warpgroups(s, w, transfer, beside)) * s.H * s.N;
}

bool launch_walk_rs(const GdnShape& s, const bf16* k, const int32_t* cu, float* state, float* transfer, bool want_out,
                    const Workspace& w, cudaStream_t stream, const bf16* q, bf16* out) {
  if (!walk_rs_applies(s, w, k, want_out, q, out)) return false;
  const int64_t rows = s.H * w.slots * kC;  // workspace rows (tiles of 64)
  Maps maps{};
  maps.w = tensor_map_sw128(w.W, kDK, rows, kC, "gdn_walk_rs (W)");
  maps.k = tensor_map_sw128(k, s.Hk * kDK, s.T, kC, "gdn_walk_rs (k)");
  maps.u = tensor_map_sw128(w.UV, w.dvp, rows, kC, "gdn_walk_rs (U)");
  if (out != nullptr) {
    maps.q = tensor_map_sw128(q, s.Hk * kDK, s.T, kC, "gdn_walk_rs (q)");
    maps.a = tensor_map_sw128(w.Aqk, kC, rows, kC, "gdn_walk_rs (Aqk)");
  }
  const bool beside = w.ready != nullptr;
  const int wgs = warpgroups(s, w, transfer != nullptr, beside);
  const int blocks = int(blocks_per_head(s, transfer != nullptr, wgs));
  const dim3 grid(unsigned(blocks), unsigned(s.H), unsigned(s.N));
  if (w.wu) {  // -W formed on the outputs' warpgroup, U in X (plan_wu_in_walk): three stages of 72 KB
    HYPIC_CUDA_REQUIRE(out != nullptr && transfer == nullptr && wgs == 1,
                       "launch_walk_rs: W formed in the walk takes a walk with outputs and no T");
    using S = Smem<3, true, 1, true, true>;
    static_assert(S::bytes <= 227 * 1024, "an sm_90 block's shared memory");
    maps.v = tensor_map_sw128(w.V, s.H * s.dv, s.T, kC, "gdn_walk_rs (v)");
    auto go = [&](auto kernel) {
      raise_smem_limit(kernel, S::bytes);
      kernel<<<grid, 2 * kNT, S::bytes, stream>>>(maps, s, cu, state, transfer, w, out);
    };
    if (formed_early())
      go(gdn_walk_rs_kernel<3, true, 1, false, true, true, true>);
    else
      go(gdn_walk_rs_kernel<3, true, 1, false, true, true>);
  } else if (w.V != nullptr) {  // U formed in the walk (plan_u_in_walk): two stages of 72 KB
    maps.v = tensor_map_sw128(w.V, s.H * s.dv, s.T, kC, "gdn_walk_rs (v)");
    raise_smem_limit(gdn_walk_rs_kernel<2, true>, Smem<2, true>::bytes);
    if (w.ready != nullptr) prefer_max_shared(gdn_walk_rs_kernel<2, true>);
    gdn_walk_rs_kernel<2, true><<<grid, kNT, Smem<2, true>::bytes, stream>>>(maps, s, cu, state, transfer, w, out);
  } else if (wgs == 2) {  // two warpgroups a block over the same tiles, U in a ring of its own
    static_assert(Smem<3, false, 2>::bytes <= 227 * 1024, "an sm_90 block's shared memory");
    if (unroll_walk(2, beside, transfer != nullptr)) {
      raise_smem_limit(gdn_walk_rs_kernel<3, false, 2, true>, Smem<3, false, 2>::bytes);
      gdn_walk_rs_kernel<3, false, 2, true><<<grid, 2 * kNT, Smem<3, false, 2>::bytes, stream>>>(
          maps, s, cu, state, transfer, w, out);
    } else {
      raise_smem_limit(gdn_walk_rs_kernel<3, false, 2>, Smem<3, false, 2>::bytes);
      gdn_walk_rs_kernel<3, false, 2><<<grid, 2 * kNT, Smem<3, false, 2>::bytes, stream>>>(maps, s, cu, state,
                                                                                          transfer, w, out);
    }
  } else if (out != nullptr && transfer == nullptr && !(beside && two_stages_beside()) && out_wg(beside)) {
    // The outputs on a warpgroup of their own (kOW): 256 threads a block, the three-stage layout.
    auto go = [&](auto kernel) {
      raise_smem_limit(kernel, Smem<3, false, 1, true>::bytes);
      kernel<<<grid, 2 * kNT, Smem<3, false, 1, true>::bytes, stream>>>(maps, s, cu, state, transfer, w, out);
    };
    if (unroll_walk(1, beside, false))
      go(gdn_walk_rs_kernel<3, false, 1, true, true>);
    else
      go(gdn_walk_rs_kernel<3, false, 1, false, true>);
  } else if (beside && two_stages_beside()) {  // gdn_prep beside the walk (launch_overlapped), two stages
    raise_smem_limit(gdn_walk_rs_kernel<2, false>, Smem<2>::bytes);
    // The largest shared-memory split, so that a prep block (52-54 KB) fits beside the walk's 144 KB: an SM takes the
    // split of the first kernel placed on it, and at its own needs the walk would get 164 KB.
    prefer_max_shared(gdn_walk_rs_kernel<2, false>);
    gdn_walk_rs_kernel<2, false><<<grid, kNT, Smem<2>::bytes, stream>>>(maps, s, cu, state, transfer, w, out);
  } else if (unroll_walk(1, beside, transfer != nullptr)) {
    raise_smem_limit(gdn_walk_rs_kernel<3, false, 1, true>, Smem<3>::bytes);
    gdn_walk_rs_kernel<3, false, 1, true><<<grid, kNT, Smem<3>::bytes, stream>>>(maps, s, cu, state, transfer, w, out);
  } else {
    raise_smem_limit(gdn_walk_rs_kernel<3, false>, Smem<3>::bytes);
    gdn_walk_rs_kernel<3, false><<<grid, kNT, Smem<3>::bytes, stream>>>(maps, s, cu, state, transfer, w, out);
  }
  HYPIC_CUDA_LAUNCH_CHECK();
  return true;
}

}  // namespace hypic::cuda::gdn
