// gdn_chunked_prefill against the CPU recurrence on the cases the fixture and model shapes of
// backend_ops_test.cc leave out: many chunks (the sequential walk and its cp.async double buffer), the
// dk <= 64 tile, value dims that are not multiples of 64 or of 8 (padded slabs, scalar load paths), strong
// decay (e^G underflowing within a chunk), and packed batches with empty and one-token sequences; each with and
// without the transfer operator and the outputs (the launch forms pick different walks); prep beside the walk,
// also under graph capture.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>
#include <utility>

#include "kernels/cuda/delta_rule.h"
#include "kernels/delta_rule.h"
#include "tests/kernels/cuda/harness.h"
#include "tests/kernels/test_util.h"

namespace hypic::cuda::test {
namespace {

using hypic::test::rel_err;

constexpr float kTol = 3e-2f;  // as CudaOps.GdnChunked*: bf16 WY operands over many chunks

struct Case {
  std::vector<int32_t> cu;  // sequence offsets; one sequence when size 2
  int64_t H, Hk, dk, dv;
  float g_lo;  // g ~ U(g_lo, -0.01)
  bool graph = false;  // each launch captured into a CUDA graph on a stream of its own, replayed twice
};

void run_case(DevicePool& pool, const Case& c) {
  const int64_t T = c.cu.back(), N = int64_t(c.cu.size()) - 1, H = c.H, Hk = c.Hk, dk = c.dk, dv = c.dv;
  auto q = hypic::test::randn(T * Hk * dk, 51), k = hypic::test::randn(T * Hk * dk, 52);
  hypic::test::l2norm_heads(q, dk);
  hypic::test::l2norm_heads(k, dk);
  for (auto& x : q) x /= std::sqrt(float(dk));
  round_bf16(q);
  round_bf16(k);
  auto v = hypic::test::randn(T * H * dv, 53);
  round_bf16(v);
  const auto g = hypic::test::uniform(T * H, 54, c.g_lo, -0.01f);
  const auto beta = hypic::test::uniform(T * H, 55, 0.05f, 0.95f);
  std::vector<float> qx(T * H * dk), kx(T * H * dk);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < H; ++h) {
      std::copy_n(&q[(t * Hk + h / (H / Hk)) * dk], dk, &qx[(t * H + h) * dk]);
      std::copy_n(&k[(t * Hk + h / (H / Hk)) * dk], dk, &kx[(t * H + h) * dk]);
    }

  const auto S0 = hypic::test::randn(N * H * dk * dv, 56, 0.3f);
  std::vector<float> T0(N * H * dk * dk);
  for (int64_t i = 0; i < N * H * dk * dk; ++i) T0[i] = 0.1f * float((i * 7919) % 13) / 13.0f;  // not the identity
  std::vector<float> S_ref = S0, T_ref = T0, o_ref(T * H * dv);
  int64_t max_len = 0;
  for (int64_t n = 0; n < N; ++n) {
    const int64_t b = c.cu[n], L = c.cu[n + 1] - c.cu[n];
    max_len = std::max(max_len, L);
    cpu::delta_rule_recurrent({L, H, dk, dv}, qx.data() + b * H * dk, kx.data() + b * H * dk, v.data() + b * H * dv,
                              g.data() + b * H, beta.data() + b * H, S_ref.data() + n * H * dk * dv,
                              o_ref.data() + b * H * dv);
    cpu::delta_rule_transfer(L, H, dk, kx.data() + b * H * dk, g.data() + b * H, beta.data() + b * H,
                             T_ref.data() + n * H * dk * dk);
  }

  const GdnShape s{T, N, H, Hk, dk, dv};
  auto dq = to_device_bf16(pool, q), dk_ = to_device_bf16(pool, k), dv_ = to_device_bf16(pool, v);
  DevArray<float> dg(pool, g), db(pool, beta);
  DevArray<int32_t> dcu(pool, c.cu);
  DevArray<unsigned char> ws(pool, gdn_chunked_workspace_bytes(s));
  // Each launch form: outputs, state and transfer operator together; outputs and state (a plain prefill, the
  // Hopper walk's own launch); the state alone (a walk with no outputs at all).
  for (int form = 0; form < 3; ++form) {
    const bool with_t = form == 0, with_out = form < 2;
    DevArray<float> dS(pool, S0), dT(pool, T0);
    DevArray<bf16> dout(pool, T * H * dv);
    auto launch = [&](cudaStream_t stream) {
      gdn_chunked_prefill(s, dq.get(), dk_.get(), dv_.get(), dg.get(), db.get(), N > 1 ? dcu.get() : nullptr,
                          max_len, dS.get(), with_out ? dout.get() : nullptr, with_t ? dT.get() : nullptr, ws.get(),
                          stream);
    };
    cudaStream_t cs = nullptr;
    cudaGraphExec_t exec = nullptr;
    if (c.graph) {  // the fork to the overlapped walk's streams and the join back must capture too
      HYPIC_CUDA_CHECK(cudaStreamCreateWithFlags(&cs, cudaStreamNonBlocking));
      cudaGraph_t graph = nullptr;
      HYPIC_CUDA_CHECK(cudaStreamBeginCapture(cs, cudaStreamCaptureModeThreadLocal));
      launch(cs);
      HYPIC_CUDA_CHECK(cudaStreamEndCapture(cs, &graph));
      HYPIC_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
      HYPIC_CUDA_CHECK(cudaGraphDestroy(graph));
    }
    for (int rep = 0; rep < (c.graph ? 2 : 1); ++rep) {
      dS.upload(S0);
      dT.upload(T0);
      HYPIC_CUDA_CHECK(cudaMemset(dout.get(), 0, sizeof(bf16) * dout.n));
      // Poison the workspace: padded tiles (and stale ready flags) must not matter.
      HYPIC_CUDA_CHECK(cudaMemset(ws.get(), 0xff, ws.n));
      if (c.graph) {
        HYPIC_CUDA_CHECK(cudaGraphLaunch(exec, cs));
        HYPIC_CUDA_CHECK(cudaStreamSynchronize(cs));
      } else {
        launch(nullptr);
      }
      const std::string what = "T " + std::to_string(T) + " N " + std::to_string(N) + " H " + std::to_string(H) +
                               " dk " + std::to_string(dk) + " dv " + std::to_string(dv) + " g_lo " +
                               std::to_string(c.g_lo) + " form " + std::to_string(form) + " replay " +
                               std::to_string(rep);
      if (with_out) {
        HYPIC_EXPECT_ERR_LT(rel_err(from_device_bf16(dout), o_ref), kTol) << "out, " << what;
      }
      HYPIC_EXPECT_ERR_LT(rel_err(dS.download(), S_ref), kTol) << "state, " << what;
      if (with_t) {
        HYPIC_EXPECT_ERR_LT(rel_err(dT.download(), T_ref), kTol) << "transfer, " << what;
      }
    }
    if (exec) HYPIC_CUDA_CHECK(cudaGraphExecDestroy(exec));
    if (cs) HYPIC_CUDA_CHECK(cudaStreamDestroy(cs));
  }
}

TEST_F(CudaOps, GdnChunkedLongSequence) {
  run_case(pool, {{0, 1000}, 4, 2, 128, 128, -0.7f});  // 16 chunks, last one partial
}

// Many chunks and heads: with the register-state walk, most chunks are prepared while the walk runs
// (launch_overlapped, unless HYPIC_CUDA_GDN_OVERLAP=0), the walk waiting on each chunk's ready flag; and the same
// launches captured into a graph and replayed.
TEST_F(CudaOps, GdnChunkedPreparedBesideTheWalk) {
  // On a Hopper GPU of 128 SMs or more, with the A/B switches unset, these cases take the overlapped form (the walk
  // with T takes 64 blocks of one warpgroup, fewer than the SMs, or 32 of two with HYPIC_CUDA_GDN_WALK_PAIR=1 or all:
  // at most half the SMs).
  int dev = 0, major = 0, sms = 0;
  HYPIC_CUDA_CHECK(cudaGetDevice(&dev));
  HYPIC_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
  HYPIC_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  const bool expect = major == 9 && sms >= 128 && std::getenv("HYPIC_CUDA_GDN_OVERLAP") == nullptr &&
                      std::getenv("HYPIC_CUDA_GDN_RS") == nullptr && std::getenv("HYPIC_CUDA_GDN_SM90") == nullptr &&
                      std::getenv("HYPIC_CUDA_GDN_FUSED_OUT") == nullptr;
  if (expect) {
    const GdnShape s{2000, 1, 16, 8, 128, 128};
    DevArray<bf16> q(pool, 2000 * 8 * 128), out(pool, 2000 * 16 * 128);
    DevArray<unsigned char> ws(pool, gdn_chunked_workspace_bytes(s));
    EXPECT_TRUE(gdn_chunked_prefill_overlaps(s, q.get(), q.get(), out.get(), true, 2000, ws.get()));
    EXPECT_TRUE(gdn_chunked_prefill_overlaps(s, q.get(), q.get(), nullptr, false, 2000, ws.get()));
    // The walk with T for 40 heads takes 160 blocks of one warpgroup (80 of two with HYPIC_CUDA_GDN_WALK_PAIR=1,
    // auto or all): more than half the SMs either way, so prep runs first.
    const GdnShape wide{2000, 1, 40, 8, 128, 128};
    DevArray<unsigned char> ws_wide(pool, gdn_chunked_workspace_bytes(wide));
    DevArray<bf16> out_wide(pool, 2000 * 40 * 128);
    EXPECT_FALSE(gdn_chunked_prefill_overlaps(wide, q.get(), q.get(), out_wide.get(), true, 2000, ws_wide.get()));
    // 32 heads with T take 128 one-warpgroup blocks, which leave prep no room beside them; from 16k tokens a sequence
    // the walk takes 64 blocks of two instead and prep runs beside it (warpgroups() in gdn_walk_rs_sm90.cu; the
    // kernel and launch are those HYPIC_CUDA_GDN_WALK_PAIR=1 with HYPIC_CUDA_GDN_WALK_UNROLL=1 checks below).
    const bool pair_rule = std::getenv("HYPIC_CUDA_GDN_WALK_PAIR") == nullptr &&
                           std::getenv("HYPIC_CUDA_GDN_OVERLAP_STAGES") == nullptr &&
                           std::getenv("HYPIC_CUDA_GDN_U_IN_WALK") == nullptr;
    if (pair_rule) {
      for (const int64_t T : {int64_t{8192}, int64_t{16384}}) {
        const GdnShape heads32{T, 1, 32, 16, 128, 128};
        DevArray<unsigned char> ws32(pool, gdn_chunked_workspace_bytes(heads32));
        DevArray<bf16> out32(pool, T * 32 * 128);
        EXPECT_EQ(gdn_chunked_prefill_overlaps(heads32, q.get(), q.get(), out32.get(), true, T, ws32.get()),
                  T >= 16384)
            << T << " tokens";
        // Without T, 64 one-warpgroup blocks: beside prep at either length.
        EXPECT_TRUE(gdn_chunked_prefill_overlaps(heads32, q.get(), q.get(), out32.get(), false, T, ws32.get()));
      }
    }
  }
  run_case(pool, {{0, 2000}, 16, 8, 128, 128, -0.7f});  // 32 chunks, 16 heads, last chunk partial
  run_case(pool, {{0, 700}, 4, 2, 128, 128, -0.7f, true});
}

TEST_F(CudaOps, GdnChunkedSmallKeyDimAndOddValueDims) {
  run_case(pool, {{0, 333}, 4, 4, 48, 96, -0.7f});    // dk <= 64 tiles, dv 96: a half-filled second slab
  run_case(pool, {{0, 200}, 2, 1, 64, 20, -0.7f});    // dv 20: scalar loads and stores
  run_case(pool, {{0, 129}, 2, 2, 128, 200, -0.7f});  // 7 state blocks, 4 output slabs
}

TEST_F(CudaOps, GdnChunkedStrongDecay) {
  run_case(pool, {{0, 400}, 4, 2, 128, 64, -6.0f});  // e^G underflows to 0 inside every chunk
}

TEST_F(CudaOps, GdnChunkedPackedWithEmptyAndTinySequences) {
  run_case(pool, {{0, 0, 1, 65, 65, 300, 301}, 4, 2, 128, 128, -0.7f});
}

// Nine sequences of uneven lengths, 16 heads: 288 blocks of one warpgroup (576 with T), more than an H100's or
// H200's 132 SMs, so the walk takes blocks of two warpgroups unless HYPIC_CUDA_GDN_WALK_PAIR=0 (warpgroups() in
// gdn_walk_rs_sm90.cu).
TEST_F(CudaOps, GdnChunkedManySequencesTakeTwoWarpgroupBlocks) {
  run_case(pool, {{0, 130, 200, 457, 520, 650, 651, 910, 1040, 1171}, 16, 8, 128, 128, -0.7f});
}

// gdn_chunked_prefill_with_bodies: every sequence's forward from zero (outputs, final state) and its body's
// (the rows after lead[n]) transfer operator and zero-start state, against the CPU recurrence over the
// body alone. Leads inside the first chunk, on a chunk boundary, past it, and covering the whole sequence.
TEST_F(CudaOps, GdnChunkedWithBodiesMatchesTheBodiesAlone) {
  // dv 128 at dk 128: the shape gdn_prep's Hopper form takes (HYPIC_CUDA_GDN_PREP_SM90=1), lead included.
  for (const auto& shape : {std::pair<int64_t, int64_t>{128, 96}, {64, 96}, {128, 128}}) {
    const int64_t dk = shape.first, dv = shape.second;
    const std::vector<int32_t> cu = {0, 300, 316, 460, 461, 461, 700, 830};
    const std::vector<int32_t> lead = {16, 16, 64, 1, 0, 70, 0};
    const int64_t T = cu.back(), N = int64_t(cu.size()) - 1, H = 4, Hk = 2;
    auto q = hypic::test::randn(T * Hk * dk, 61), k = hypic::test::randn(T * Hk * dk, 62);
    hypic::test::l2norm_heads(q, dk);
    hypic::test::l2norm_heads(k, dk);
    for (auto& x : q) x /= std::sqrt(float(dk));
    round_bf16(q);
    round_bf16(k);
    auto v = hypic::test::randn(T * H * dv, 63);
    round_bf16(v);
    const auto g = hypic::test::uniform(T * H, 64, -0.7f, -0.01f);
    const auto beta = hypic::test::uniform(T * H, 65, 0.05f, 0.95f);
    std::vector<float> qx(T * H * dk), kx(T * H * dk);
    for (int64_t t = 0; t < T; ++t)
      for (int64_t h = 0; h < H; ++h) {
        std::copy_n(&q[(t * Hk + h / (H / Hk)) * dk], dk, &qx[(t * H + h) * dk]);
        std::copy_n(&k[(t * Hk + h / (H / Hk)) * dk], dk, &kx[(t * H + h) * dk]);
      }
    std::vector<float> S_ref(N * H * dk * dv, 0.0f), B_ref(N * H * dk * dv, 0.0f), T_ref(N * H * dk * dk, 0.0f);
    std::vector<float> o_ref(T * H * dv), scratch(T * H * dv);
    int64_t max_len = 0;
    for (int64_t n = 0; n < N; ++n) {
      const int64_t b = cu[n], L = cu[n + 1] - cu[n], e = b + lead[n], Lb = L - lead[n];
      max_len = std::max(max_len, L);
      cpu::delta_rule_recurrent({L, H, dk, dv}, qx.data() + b * H * dk, kx.data() + b * H * dk,
                                v.data() + b * H * dv, g.data() + b * H, beta.data() + b * H,
                                S_ref.data() + n * H * dk * dv, o_ref.data() + b * H * dv);
      cpu::delta_rule_recurrent({Lb, H, dk, dv}, qx.data() + e * H * dk, kx.data() + e * H * dk,
                                v.data() + e * H * dv, g.data() + e * H, beta.data() + e * H,
                                B_ref.data() + n * H * dk * dv, scratch.data());
      for (int64_t h = 0; h < H; ++h)
        for (int64_t i = 0; i < dk; ++i) T_ref[((n * H + h) * dk + i) * dk + i] = 1.0f;
      cpu::delta_rule_transfer(Lb, H, dk, kx.data() + e * H * dk, g.data() + e * H, beta.data() + e * H,
                               T_ref.data() + n * H * dk * dk);
    }
    const GdnShape s{T, N, H, Hk, dk, dv};
    auto dq = to_device_bf16(pool, q), dk_ = to_device_bf16(pool, k), dv_ = to_device_bf16(pool, v);
    std::vector<float> eye(N * H * dk * dk, 0.0f);
    for (int64_t i = 0; i < N * H; ++i)
      for (int64_t j = 0; j < dk; ++j) eye[(i * dk + j) * dk + j] = 1.0f;
    DevArray<float> dg(pool, g), db(pool, beta), dS(pool, std::vector<float>(N * H * dk * dv, 0.0f));
    DevArray<float> dB(pool, std::vector<float>(N * H * dk * dv, 0.0f)), dT(pool, eye);
    DevArray<int32_t> dcu(pool, cu), dlead(pool, lead);
    DevArray<bf16> dout(pool, T * H * dv);
    DevArray<unsigned char> ws(pool, gdn_bodies_workspace_bytes(s));
    HYPIC_CUDA_CHECK(cudaMemset(ws.get(), 0xff, ws.n));
    gdn_chunked_prefill_with_bodies(s, dq.get(), dk_.get(), dv_.get(), dg.get(), db.get(), dcu.get(), max_len,
                                    dlead.get(), dS.get(), dout.get(), dB.get(), dT.get(), ws.get(), nullptr);
    const std::string what = "dk " + std::to_string(dk) + " dv " + std::to_string(dv);
    HYPIC_EXPECT_ERR_LT(rel_err(from_device_bf16(dout), o_ref), kTol) << "out, " << what;
    HYPIC_EXPECT_ERR_LT(rel_err(dS.download(), S_ref), kTol) << "state, " << what;
    HYPIC_EXPECT_ERR_LT(rel_err(dB.download(), B_ref), kTol) << "body state, " << what;
    HYPIC_EXPECT_ERR_LT(rel_err(dT.download(), T_ref), kTol) << "body transfer, " << what;

    // Again with every sequence's results sent to its own buffers (in reverse order, so a sequence's slot
    // differs from its packed position; sequence 1's body is not wanted).
    const int64_t ns = H * dk * dv, no = H * dk * dk;
    DevArray<float> own_S(pool, N * ns), own_B(pool, N * ns), own_T(pool, N * no);
    HYPIC_CUDA_CHECK(cudaMemset(own_B.get(), 0, sizeof(float) * N * ns));
    std::vector<float*> pS, pB, pT;
    for (int64_t n = 0; n < N; ++n) {
      const int64_t slot = N - 1 - n;
      pS.push_back(own_S.get() + slot * ns);
      pB.push_back(n == 1 ? nullptr : own_B.get() + slot * ns);
      pT.push_back(own_T.get() + slot * no);
    }
    DevArray<float*> dpS(pool, pS), dpB(pool, pB), dpT(pool, pT);
    HYPIC_CUDA_CHECK(cudaMemset(dS.get(), 0, sizeof(float) * N * ns));
    BodyOutputs to;
    to.state = dpS.get();
    to.body = dpB.get();
    to.transfer = dpT.get();
    gdn_chunked_prefill_with_bodies(s, dq.get(), dk_.get(), dv_.get(), dg.get(), db.get(), dcu.get(), max_len,
                                    dlead.get(), dS.get(), dout.get(), nullptr, dT.get(), ws.get(), nullptr, to);
    const auto gS = own_S.download(), gB = own_B.download(), gT = own_T.download();
    for (int64_t n = 0; n < N; ++n) {
      const int64_t slot = N - 1 - n;
      auto slice = [](const std::vector<float>& v, int64_t at, int64_t len) {
        return std::vector<float>(v.begin() + at, v.begin() + at + len);
      };
      const std::string seq = what + ", sequence " + std::to_string(n);
      HYPIC_EXPECT_ERR_LT(rel_err(slice(gS, slot * ns, ns), slice(S_ref, n * ns, ns)), kTol) << "own state, " << seq;
      HYPIC_EXPECT_ERR_LT(rel_err(slice(gT, slot * no, no), slice(T_ref, n * no, no)), kTol) << "own transfer, " << seq;
      if (n == 1)
        EXPECT_EQ(rel_err(slice(gB, slot * ns, ns), std::vector<float>(ns, 0.0f)), 0.0f) << "unwanted body, " << seq;
      else
        HYPIC_EXPECT_ERR_LT(rel_err(slice(gB, slot * ns, ns), slice(B_ref, n * ns, ns)), kTol) << "own body, " << seq;
    }
  }
}

}  // namespace
}  // namespace hypic::cuda::test
