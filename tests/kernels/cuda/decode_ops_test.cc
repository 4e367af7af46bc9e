// The decode step's fused ops: the one-row products (cuda::gemv) against the CPU reference ops they
// replace (cpu::rmsnorm, cpu::linear, SwiGLU, the MoE residual sum, the Gated DeltaNet gates and gated norm), and the
// fused query/key norm + rotation (cuda::qk_norm_rope), the decode MoE (cuda::moe_decode), conv + split
// (cuda::gdn_conv_split_rows), conv + split + recurrent step (cuda::gdn_conv_recurrent_rows) and the MoE
// sublayer in one launch (cuda::moe_layer_decode) against the CUDA ops they replace, bit for bit (those ops are
// checked against the CPU in backend_ops_test.cc); and the batched decode attention after the kernel that
// appends its new row, and with that kernel's work folded into it; and the split combine's one-trip form
// against its loops.
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "kernels/attention.h"
#include "kernels/cuda/activation.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/conv1d.h"
#include "kernels/cuda/delta_rule.h"
#include "kernels/cuda/gemv.h"
#include "kernels/cuda/model_glue.h"
#include "kernels/cuda/moe.h"
#include "kernels/cuda/moe_layer_decode.h"
#include "kernels/cuda/moe_small.h"
#include "kernels/cuda/norm.h"
#include "kernels/cuda/rope.h"
#include "kernels/gemm.h"
#include "kernels/norm.h"
#include "tests/kernels/cuda/harness.h"
#include "tests/kernels/test_util.h"

namespace hypic::cuda::test {
namespace {

using hypic::test::rel_err;

constexpr float kTolF32Out = 2e-3f;   // fp32 output of bf16 products
constexpr float kTolBf16Out = 1.2e-2f;  // one bf16 rounding of the output

float round16(float v) { return bf16_to_f32(f32_to_bf16(v)); }
float silu(float v) { return v / (1.0f + std::exp(-v)); }
float sigmoid(float v) { return 1.0f / (1.0f + std::exp(-v)); }

std::vector<float> linear_ref(const std::vector<float>& x, int64_t K, const std::vector<float>& w, int64_t N) {
  std::vector<float> y(N);
  cpu::linear(x.data(), 1, K, w.data(), DType::F32, N, y.data());
  return y;
}

// The qkv / z / ba projections of a Gated DeltaNet layer at 35B-A3B's sizes (scaled down in rows), the
// input normed in the kernel; then the same with a plain input. Odd row counts exercise the padding.
TEST_F(CudaOps, GemvNormedInputThreeTargets) {
  Stream st;
  for (const int64_t K : {int64_t{1024}, int64_t{2048}, int64_t{4096}}) {
    const std::vector<int64_t> rows = {1000, 517, 7};
    const auto h = hypic::test::randn(K, 11, 3.0f);
    const auto nw = hypic::test::randn(K, 12, 0.2f);
    for (const bool zc : {false, true}) {
      std::vector<float> x(K);
      cpu::rmsnorm(h.data(), x.data(), 1, K, nw.data(), 1e-6f, zc);
      round_bf16(x);
      DevArray<float> dh(pool, h), dnw(pool, nw);
      DevArray<bf16> dx(pool, K);
      std::vector<DevArray<bf16>> ws;
      std::vector<std::vector<float>> wh, ref;
      for (size_t j = 0; j < rows.size(); ++j) {
        wh.push_back(randn_bf16(rows[j] * K, 20 + j, 0.05f));
        ws.push_back(to_device_bf16(pool, wh.back()));
        ref.push_back(linear_ref(x, K, wh.back(), rows[j]));
      }
      DevArray<bf16> y0(pool, rows[0]), y1(pool, rows[1]);
      DevArray<float> y2(pool, rows[2]);
      const GemvTarget t[3] = {{ws[0].get(), rows[0], y0.get(), DType::BF16},
                               {ws[1].get(), rows[1], y1.get(), DType::BF16},
                               {ws[2].get(), rows[2], y2.get(), DType::F32}};
      GemvInput in;
      in.h = dh.get();
      in.norm_w = dnw.get();
      in.zero_centred = zc;
      in.x_out = dx.get();
      gemv(in, K, t, 3, st);
      st.synchronize();
      HYPIC_EXPECT_ERR_LT(rel_err(from_device_bf16(y0), ref[0]), kTolBf16Out) << K;
      HYPIC_EXPECT_ERR_LT(rel_err(from_device_bf16(y1), ref[1]), kTolBf16Out) << K;
      HYPIC_EXPECT_ERR_LT(rel_err(y2.download(), ref[2]), kTolF32Out) << K;
      // The normed row equals cuda::rmsnorm's bit for bit.
      DevArray<bf16> xn(pool, K);
      rmsnorm(dh.get(), xn.get(), 1, K, dnw.get(), 1e-6f, zc, st);
      st.synchronize();
      const auto a = from_device_bf16(dx), b = from_device_bf16(xn);
      EXPECT_EQ(std::memcmp(a.data(), b.data(), sizeof(float) * K), 0) << "normed row differs, K " << K;
      // A plain input row gives the same products.
      GemvInput plain;
      plain.x = xn.get();
      DevArray<float> y2b(pool, rows[2]);
      const GemvTarget one{ws[2].get(), rows[2], y2b.get(), DType::F32};
      gemv(plain, K, &one, 1, st);
      st.synchronize();
      HYPIC_EXPECT_ERR_LT(rel_err(y2b.download(), ref[2]), kTolF32Out);
    }
  }
}

// Several rows a warp sum each row in the one-row order, so every form gives the same bits: one row a warp,
// two and four with the rows preloaded before the wait (grids of at most a block an SM) and without
// (HYPIC_CUDA_GEMV_PRELOAD=0, as a larger grid runs).
TEST_F(CudaOps, GemvRowsPerWarpFormsGiveTheSameBits) {
  Stream st;
  for (const int64_t K : {int64_t{1024}, int64_t{2048}, int64_t{4096}}) {
    const int64_t rows = 1281;  // the router and shared expert's rows at 35B-A3B: 81 blocks of two a warp
    const auto x = randn_bf16(K, 51, 1.0f), w = randn_bf16(rows * K, 52, 0.05f);
    auto dx = to_device_bf16(pool, x), dw = to_device_bf16(pool, w);
    GemvInput in;
    in.x = dx.get();
    std::vector<std::vector<float>> outs;
    for (const int R : {1, 2, 4})
      for (const bool pre : {true, false}) {
        if (R == 1 && !pre) continue;  // one row a warp always preloads
        if (!pre) setenv("HYPIC_CUDA_GEMV_PRELOAD", "0", 1);
        DevArray<float> y(pool, rows);
        const GemvTarget t{dw.get(), rows, y.get(), DType::F32};
        gemv(in, K, &t, 1, st, R);
        st.synchronize();
        unsetenv("HYPIC_CUDA_GEMV_PRELOAD");
        outs.push_back(y.download());
        EXPECT_EQ(std::memcmp(outs.back().data(), outs[0].data(), sizeof(float) * rows), 0)
            << "K " << K << ", " << R << " rows a warp, preloaded " << pre;
      }
    HYPIC_EXPECT_ERR_LT(rel_err(outs[0], linear_ref(x, K, w, rows)), kTolF32Out) << K;
  }
}

// The MoE layer's one-row chain: router + shared expert gate/up (SwiGLU) + its gate logit, then the shared
// down projection with the routed output and the residual in its epilogue; and a plain Add (out_proj).
TEST_F(CudaOps, GemvEpilogues) {
  Stream st;
  const int64_t D = 2048, Is = 512, E = 256;
  const auto x = randn_bf16(D, 31, 1.0f);
  const auto wr = randn_bf16(E * D, 32, 0.05f), wgu = randn_bf16(2 * Is * D, 33, 0.05f),
             wsg = randn_bf16(D, 34, 0.05f), wd = randn_bf16(D * Is, 35, 0.05f);
  const auto routed = randn_bf16(D, 36, 0.5f);
  const auto h0 = hypic::test::randn(D, 37, 1.0f);
  auto dx = to_device_bf16(pool, x), dwr = to_device_bf16(pool, wr), dwgu = to_device_bf16(pool, wgu),
       dwsg = to_device_bf16(pool, wsg), dwd = to_device_bf16(pool, wd), drouted = to_device_bf16(pool, routed);
  DevArray<float> router(pool, E), sg(pool, 1), h(pool, h0);
  DevArray<bf16> act(pool, Is);
  const GemvTarget first[3] = {{dwr.get(), E, router.get(), DType::F32},
                               {dwgu.get(), Is, act.get(), DType::BF16, GemvEpilogue::SwiGlu},
                               {dwsg.get(), 1, sg.get(), DType::F32}};
  GemvInput in;
  in.x = dx.get();
  gemv(in, D, first, 3, st);
  st.synchronize();
  const auto r_ref = linear_ref(x, D, wr, E), gu = linear_ref(x, D, wgu, 2 * Is), sg_ref = linear_ref(x, D, wsg, 1);
  HYPIC_EXPECT_ERR_LT(rel_err(router.download(), r_ref), kTolF32Out);
  HYPIC_EXPECT_ERR_LT(rel_err(sg.download(), sg_ref), kTolF32Out);
  std::vector<float> act_ref(Is);
  for (int64_t i = 0; i < Is; ++i) act_ref[i] = round16(silu(round16(gu[i])) * round16(gu[Is + i]));
  const auto act_got = from_device_bf16(act);
  HYPIC_EXPECT_ERR_LT(rel_err(act_got, act_ref), kTolBf16Out);

  for (const bool gated : {true, false}) {
    h.upload(h0);
    GemvInput ain;
    ain.x = act.get();
    GemvTarget down{dwd.get(), D, h.get(), DType::F32, GemvEpilogue::MoeResidual};
    down.routed = drouted.get();
    down.gate = gated ? sg.get() : nullptr;
    gemv(ain, Is, &down, 1, st);
    st.synchronize();
    const auto dsum = linear_ref(act_got, Is, wd, D);
    const float s = gated ? sigmoid(sg.download()[0]) : 1.0f;
    std::vector<float> want(D);
    for (int64_t n = 0; n < D; ++n) want[n] = h0[n] + routed[n] + s * dsum[n];
    HYPIC_EXPECT_ERR_LT(rel_err(h.download(), want), kTolBf16Out) << "gated " << gated;
  }

  // Add: h += W x (an output projection into the residual stream).
  h.upload(h0);
  GemvInput ain;
  ain.x = act.get();
  const GemvTarget add{dwd.get(), D, h.get(), DType::F32, GemvEpilogue::Add};
  gemv(ain, Is, &add, 1, st);
  st.synchronize();
  const auto dsum = linear_ref(act_got, Is, wd, D);
  std::vector<float> want(D);
  for (int64_t n = 0; n < D; ++n) want[n] = h0[n] + dsum[n];
  HYPIC_EXPECT_ERR_LT(rel_err(h.download(), want), kTolF32Out);
}

// The decode MoE (routing inside, the shared expert folded into the down kernel) against the four launches
// it replaces, bit for bit: moe_route, moe_small_gate_up, moe_small_down_combine and gemv's MoeResidual
// (checked against the CPU in backend_ops_test.cc and above). Shapes: 35B-A3B's K, I and Is with fewer
// experts; a router wider than 256 experts with a hidden size off the 256 grid; a hidden size past 2048;
// Qwen3-Next's K = 10 (22 pieces of a down row: more than the registers hold before the wait).
TEST_F(CudaOps, MoeDecodeEqualsRouteSmallExpertsAndResidual) {
  struct Case {
    int64_t E, K, D, I, Is;
    bool normalize, gated;
  };
  for (const Case c : {Case{40, 8, 1024, 512, 512, true, true}, Case{300, 4, 264, 256, 256, false, false},
                       Case{32, 8, 2304, 256, 512, true, true}, Case{48, 10, 512, 512, 512, true, true}}) {
    SCOPED_TRACE("E " + std::to_string(c.E) + " D " + std::to_string(c.D));
    ASSERT_TRUE(moe_decode_supported(c.E, c.K, c.D, c.I, c.Is));
    Stream st;
    const auto logits = hypic::test::randn(c.E, 41, 2.0f);
    const auto x = randn_bf16(c.D, 42, 1.0f), sact = randn_bf16(c.Is, 43, 1.0f);
    const auto gu = randn_bf16(c.E * 2 * c.I * c.D, 44, 0.05f), dn = randn_bf16(c.E * c.D * c.I, 45, 0.05f),
               sdn = randn_bf16(c.D * c.Is, 46, 0.05f);
    const auto h0 = hypic::test::randn(c.D, 47, 1.0f);
    DevArray<float> dlog(pool, logits), dsg(pool, std::vector<float>{0.7f}), h_ref(pool, h0), h_got(pool, h0);
    auto dx = to_device_bf16(pool, x), dsact = to_device_bf16(pool, sact), dgu = to_device_bf16(pool, gu),
         ddn = to_device_bf16(pool, dn), dsdn = to_device_bf16(pool, sdn);
    DevArray<int32_t> ids_ref(pool, c.K), ids_got(pool, c.K);
    DevArray<float> w_ref(pool, c.K), w_got(pool, c.K);
    DevArray<bf16> act_ref(pool, c.K * c.I), act_got(pool, c.K * c.I), y(pool, c.D);

    moe_route(dlog.get(), 1, c.E, c.K, c.normalize, ids_ref.get(), w_ref.get(), st);
    moe_small_gate_up(dx.get(), 1, c.D, c.D, ids_ref.get(), c.K, dgu.get(), c.I, act_ref.get(), st);
    moe_small_down_combine(act_ref.get(), 1, c.K, c.I, ids_ref.get(), w_ref.get(), ddn.get(), c.D, y.get(), st);
    GemvInput ain;
    ain.x = dsact.get();
    GemvTarget down{dsdn.get(), c.D, h_ref.get(), DType::F32, GemvEpilogue::MoeResidual};
    down.routed = y.get();
    down.gate = c.gated ? dsg.get() : nullptr;
    gemv(ain, c.Is, &down, 1, st);

    moe_decode({.logits = dlog.get(), .E = c.E, .K = c.K, .normalize = c.normalize, .x = dx.get(), .D = c.D,
                .gate_up = dgu.get(), .I = c.I, .act = act_got.get(), .down = ddn.get(), .shared_act = dsact.get(),
                .shared_down = dsdn.get(), .Is = c.Is, .shared_gate = c.gated ? dsg.get() : nullptr,
                .h = h_got.get(), .ids = ids_got.get(), .weights = w_got.get()},
               st);
    st.synchronize();
    EXPECT_EQ(ids_got.download(), ids_ref.download());
    EXPECT_EQ(w_got.download(), w_ref.download());
    EXPECT_EQ(from_device_bf16(act_got), from_device_bf16(act_ref));
    const auto got = h_got.download(), want = h_ref.download();
    ASSERT_EQ(got.size(), want.size());
    int64_t differ = 0;
    for (size_t n = 0; n < got.size(); ++n) differ += std::memcmp(&got[n], &want[n], sizeof(float)) != 0;
    EXPECT_EQ(differ, 0) << "of " << got.size() << " outputs";
    // The residual did move: the test would fail if neither path wrote h.
    EXPECT_GT(rel_err(got, h0), 1e-3f);
  }
  EXPECT_FALSE(moe_decode_supported(256, 32, 2048, 1024, 512));  // K*I + Is past the shared memory
  EXPECT_FALSE(moe_decode_supported(256, 8, 2048, 500, 512));   // I off the 256 grid
}

// The MoE sublayer in one launch against its three: the normed router / shared gate-up / gate product
// (cuda::gemv) and cuda::moe_decode, bit for bit, over two steps (the grid barriers' count carried over).
TEST_F(CudaOps, MoeLayerDecodeEqualsGemvThenMoeDecode) {
  struct Case {
    int64_t E, K, D, I, Is;
    bool normalize, gated, zc;
  };
  for (const Case c : {Case{256, 8, 2048, 512, 512, true, true, false}, Case{64, 4, 1024, 256, 256, false, false, true},
                       Case{300, 6, 1536, 256, 512, true, true, false}}) {
    SCOPED_TRACE("E " + std::to_string(c.E) + " D " + std::to_string(c.D));
    ASSERT_TRUE(moe_layer_decode_supported(c.E, c.K, c.D, c.I, c.Is));
    Stream st;
    const auto h0 = hypic::test::randn(c.D, 51, 2.0f), nw = hypic::test::randn(c.D, 52, 0.2f);
    const auto rw = randn_bf16(c.E * c.D, 53, 0.05f), sgu = randn_bf16(2 * c.Is * c.D, 54, 0.05f),
               sgw = randn_bf16(c.D, 55, 0.05f), gu = randn_bf16(c.E * 2 * c.I * c.D, 56, 0.05f),
               dn = randn_bf16(c.E * c.D * c.I, 57, 0.05f), sdn = randn_bf16(c.D * c.Is, 58, 0.05f);
    DevArray<float> dnw(pool, nw), h_ref(pool, h0), h_got(pool, h0);
    auto drw = to_device_bf16(pool, rw), dsgu = to_device_bf16(pool, sgu), dsgw = to_device_bf16(pool, sgw),
         dgu = to_device_bf16(pool, gu), ddn = to_device_bf16(pool, dn), dsdn = to_device_bf16(pool, sdn);
    DevArray<float> log_ref(pool, c.E), log_got(pool, c.E), sg_ref(pool, 1), sg_got(pool, 1);
    DevArray<bf16> x_ref(pool, c.D), x_got(pool, c.D), sact_ref(pool, c.Is), sact_got(pool, c.Is);
    DevArray<bf16> act_ref(pool, c.K * c.I), act_got(pool, c.K * c.I);
    DevArray<int32_t> ids_ref(pool, c.K), ids_got(pool, c.K);
    DevArray<float> w_ref(pool, c.K), w_got(pool, c.K);
    DevArray<unsigned long long> barrier(pool, std::vector<unsigned long long>{0});
    for (int step = 0; step < 2; ++step) {
      SCOPED_TRACE("step " + std::to_string(step));
      GemvInput in;
      in.h = h_ref.get();
      in.norm_w = dnw.get();
      in.zero_centred = c.zc;
      in.x_out = x_ref.get();
      GemvTarget first[3] = {{drw.get(), c.E, log_ref.get(), DType::F32},
                             {dsgu.get(), c.Is, sact_ref.get(), DType::BF16, GemvEpilogue::SwiGlu},
                             {dsgw.get(), 1, sg_ref.get(), DType::F32}};
      gemv(in, c.D, first, c.gated ? 3 : 2, st);
      moe_decode({.logits = log_ref.get(), .E = c.E, .K = c.K, .normalize = c.normalize, .x = x_ref.get(),
                  .D = c.D, .gate_up = dgu.get(), .I = c.I, .act = act_ref.get(), .down = ddn.get(),
                  .shared_act = sact_ref.get(), .shared_down = dsdn.get(), .Is = c.Is,
                  .shared_gate = c.gated ? sg_ref.get() : nullptr, .h = h_ref.get(), .ids = ids_ref.get(),
                  .weights = w_ref.get()},
                 st);

      MoeLayerDecodeArgs a;
      a.h = h_got.get();
      a.norm_w = dnw.get();
      a.zero_centred = c.zc;
      a.x = x_got.get();
      a.D = c.D;
      a.router = drw.get();
      a.logits = log_got.get();
      a.E = c.E;
      a.K = c.K;
      a.normalize = c.normalize;
      a.shared_gate_up = dsgu.get();
      a.shared_act = sact_got.get();
      a.shared_gate_w = c.gated ? dsgw.get() : nullptr;
      a.shared_gate = c.gated ? sg_got.get() : nullptr;
      a.shared_down = dsdn.get();
      a.Is = c.Is;
      a.gate_up = dgu.get();
      a.down = ddn.get();
      a.I = c.I;
      a.act = act_got.get();
      a.ids = ids_got.get();
      a.weights = w_got.get();
      a.barrier = barrier.get();
      moe_layer_decode(a, st);
      st.synchronize();
      const auto same = [](const std::vector<float>& x, const std::vector<float>& y) {
        return x.size() == y.size() && std::memcmp(x.data(), y.data(), sizeof(float) * x.size()) == 0;
      };
      EXPECT_TRUE(same(from_device_bf16(x_got), from_device_bf16(x_ref))) << "normed row";
      EXPECT_TRUE(same(log_got.download(), log_ref.download())) << "router logits";
      EXPECT_TRUE(same(from_device_bf16(sact_got), from_device_bf16(sact_ref))) << "shared activations";
      if (c.gated) {
        EXPECT_TRUE(same(sg_got.download(), sg_ref.download())) << "shared gate";
      }
      EXPECT_EQ(ids_got.download(), ids_ref.download());
      EXPECT_TRUE(same(w_got.download(), w_ref.download())) << "routing weights";
      EXPECT_TRUE(same(from_device_bf16(act_got), from_device_bf16(act_ref))) << "routed activations";
      const auto got = h_got.download(), want = h_ref.download();
      int64_t differ = 0;
      for (size_t n = 0; n < got.size(); ++n) differ += std::memcmp(&got[n], &want[n], sizeof(float)) != 0;
      EXPECT_EQ(differ, 0) << "of " << got.size() << " outputs";
      EXPECT_GT(rel_err(got, h0), 1e-3f);  // the residual moved
    }
    // Two launches of two barriers, one block an SM arriving at each.
    int dev = 0, sms = 0;
    ASSERT_EQ(cudaGetDevice(&dev), cudaSuccess);
    ASSERT_EQ(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev), cudaSuccess);
    EXPECT_EQ(barrier.download()[0], 4ull * unsigned(sms));
  }
  EXPECT_FALSE(moe_layer_decode_supported(256, 8, 4096, 512, 512));  // D past a lane's registers
  EXPECT_FALSE(moe_layer_decode_supported(256, 8, 2048, 500, 512));  // I off the 256 grid
}

TEST_F(CudaOps, GemvRejectsBadShapes) {
  Stream st;
  DevArray<bf16> w(pool, 64 * 64), x(pool, 64);
  DevArray<float> y(pool, 64);
  GemvInput in;
  in.x = x.get();
  const GemvTarget t{w.get(), 64, y.get(), DType::F32};
  EXPECT_THROW(gemv(in, 60, &t, 1, st), UnsupportedShape);  // K not a multiple of 8
  const GemvTarget swiglu_f32{w.get(), 32, y.get(), DType::F32, GemvEpilogue::SwiGlu};
  EXPECT_THROW(gemv(in, 64, &swiglu_f32, 1, st), UnsupportedShape);
  GemvInput normed;
  normed.h = y.get();
  normed.norm_w = y.get();
  EXPECT_THROW(gemv(normed, 64, &t, 1, st), UnsupportedShape);  // a normed row needs K >= 1024
}

// A Gated DeltaNet layer's output product with the gated norm in its prologue gives what
// cuda::rmsnorm_gated_silu then the product give, bit for bit (35B-A3B's 32 heads of 128, and 64 heads of 64);
// the normed row against the CPU's gated norm.
TEST_F(CudaOps, GemvGatedInputEqualsGatedNormThenProduct) {
  Stream st;
  for (const auto& [H, hd] : {std::pair<int64_t, int64_t>{32, 128}, {64, 64}}) {
    const int64_t K = H * hd, N = 2048;
    const auto o = randn_bf16(K, 61, 1.5f), z = randn_bf16(K, 62, 1.0f), w = randn_bf16(N * K, 63, 0.05f);
    const auto nw = hypic::test::randn(hd, 64, 0.3f);
    auto d_o = to_device_bf16(pool, o), dz = to_device_bf16(pool, z), dw = to_device_bf16(pool, w);
    DevArray<float> dnw(pool, nw), y1(pool, hypic::test::randn(N, 65, 1.0f)), y2(pool, N);
    copy_to_device(y2.get(), y1.get(), sizeof(float) * N, cudaMemcpyDeviceToDevice);
    DevArray<bf16> xn(pool, K);
    rmsnorm_gated_silu(d_o.get(), dz.get(), xn.get(), H, hd, dnw.get(), 1e-6f, st);
    GemvInput plain;
    plain.x = xn.get();
    const GemvTarget add1{dw.get(), N, y1.get(), DType::F32, GemvEpilogue::Add};
    gemv(plain, K, &add1, 1, st);
    ASSERT_TRUE(gemv_gated_input_fits(K, hd, d_o.get(), dz.get(), dnw.get()));
    GemvInput gated;
    gated.gated_o = d_o.get();
    gated.gated_z = dz.get();
    gated.head_dim = hd;
    gated.norm_w = dnw.get();
    const GemvTarget add2{dw.get(), N, y2.get(), DType::F32, GemvEpilogue::Add};
    gemv(gated, K, &add2, 1, st);
    st.synchronize();
    EXPECT_EQ(y1.download(), y2.download()) << "heads " << H << " x " << hd;
    std::vector<float> ref(K);
    for (int64_t h = 0; h < H; ++h) {
      double ss = 0;
      for (int64_t i = 0; i < hd; ++i) ss += double(o[h * hd + i]) * o[h * hd + i];
      const float inv = float(1.0 / std::sqrt(ss / hd + 1e-6));
      for (int64_t i = 0; i < hd; ++i) ref[h * hd + i] = nw[i] * o[h * hd + i] * inv * silu(z[h * hd + i]);
    }
    HYPIC_EXPECT_ERR_LT(rel_err(from_device_bf16(xn), ref), kTolBf16Out) << "heads " << H << " x " << hd;
  }
  DevArray<bf16> a(pool, 1024);
  DevArray<float> nw(pool, 128);
  EXPECT_FALSE(gemv_gated_input_fits(1000, 8, a.get(), a.get(), nw.get()));  // K not a multiple of 256
  EXPECT_FALSE(gemv_gated_input_fits(1024, 96, a.get(), a.get(), nw.get()));  // not a power of two
  EXPECT_FALSE(gemv_gated_input_fits(1024, 512, a.get(), a.get(), nw.get()));  // past 256
}

// An attention output under its sigmoid gate (the gate rows interleaved with the queries, as Qwen3.5's
// projection lays them out) in the product's prologue gives what sigmoid_mul then the product give.
TEST_F(CudaOps, GemvSigmoidInputEqualsSigmoidMulThenProduct) {
  Stream st;
  for (const auto& [H, hd] : {std::pair<int64_t, int64_t>{16, 256}, {12, 64}}) {
    const int64_t K = H * hd, N = 1000;
    const auto att = randn_bf16(K, 71, 1.0f), qg = randn_bf16(2 * K, 72, 2.0f), w = randn_bf16(N * K, 73, 0.05f);
    auto datt = to_device_bf16(pool, att), dqg = to_device_bf16(pool, qg), dw = to_device_bf16(pool, w);
    auto gated = to_device_bf16(pool, att);
    DevArray<float> y1(pool, hypic::test::randn(N, 74, 1.0f)), y2(pool, N);
    copy_to_device(y2.get(), y1.get(), sizeof(float) * N, cudaMemcpyDeviceToDevice);
    sigmoid_mul(gated.get(), hd, dqg.get() + hd, 2 * hd, H, hd, st);
    GemvInput plain;
    plain.x = gated.get();
    const GemvTarget add1{dw.get(), N, y1.get(), DType::F32, GemvEpilogue::Add};
    gemv(plain, K, &add1, 1, st);
    ASSERT_TRUE(gemv_sigmoid_input_fits(K, hd, 2 * hd, datt.get(), dqg.get() + hd));
    GemvInput sig;
    sig.sig_x = datt.get();
    sig.sig_gate = dqg.get() + hd;
    sig.head_dim = hd;
    sig.gate_ld = 2 * hd;
    const GemvTarget add2{dw.get(), N, y2.get(), DType::F32, GemvEpilogue::Add};
    gemv(sig, K, &add2, 1, st);
    st.synchronize();
    EXPECT_EQ(y1.download(), y2.download()) << "heads " << H << " x " << hd;
    EXPECT_EQ(from_device_bf16(datt), att);  // the input row is left as it was
    // The product did move y: the test would fail if neither launch wrote it.
    EXPECT_GT(rel_err(y2.download(), hypic::test::randn(N, 74, 1.0f)), 1e-3f);
  }
  DevArray<bf16> a(pool, 1024);
  EXPECT_FALSE(gemv_sigmoid_input_fits(1024, 12, 24, a.get(), a.get()));     // head dim not a multiple of 8
  EXPECT_FALSE(gemv_sigmoid_input_fits(1000, 64, 128, a.get(), a.get()));    // K not a multiple of the head dim
  EXPECT_FALSE(gemv_sigmoid_input_fits(1024, 64, 32, a.get(), a.get()));     // gate rows narrower than a head
}

// The ba product with the gates in its epilogue gives what the product then cuda::gdn_gates give.
TEST_F(CudaOps, GemvGdnGatesEqualProductThenGates) {
  Stream st;
  const int64_t D = 2048, H = 32;
  const auto x = randn_bf16(D, 51, 1.0f), w = randn_bf16(2 * H * D, 52, 0.1f);
  const auto a_log = hypic::test::randn(H, 53, 1.0f), dt_bias = hypic::test::randn(H, 54, 1.0f);
  auto dx = to_device_bf16(pool, x), dw = to_device_bf16(pool, w);
  DevArray<float> da(pool, a_log), ddt(pool, dt_bias), ba(pool, 2 * H), g1(pool, H), b1(pool, H), g2(pool, H),
      b2(pool, H);
  GemvInput in;
  in.x = dx.get();
  for (const int R : {2, 4}) {
    const GemvTarget plain{dw.get(), 2 * H, ba.get(), DType::F32};
    gemv(in, D, &plain, 1, st, R);
    gdn_gates(ba.get(), 1, H, da.get(), ddt.get(), g1.get(), b1.get(), st);
    GemvTarget fused{dw.get(), 2 * H, b2.get(), DType::F32, GemvEpilogue::GdnGates};
    fused.a_log = da.get();
    fused.dt_bias = ddt.get();
    fused.g_out = g2.get();
    gemv(in, D, &fused, 1, st, R);
    st.synchronize();
    EXPECT_EQ(g1.download(), g2.download()) << R;
    EXPECT_EQ(b1.download(), b2.download()) << R;
  }
}

// Conv + split of one token per row over each row's own tail, against causal_conv1d_silu then
// gdn_split_qkv: outputs and advanced tails bit for bit, at 35B-A3B's GDN shape and a small one.
TEST_F(CudaOps, GdnConvSplitRowsEqualsConvThenSplit) {
  Stream st;
  struct Case {
    int64_t N, Hk, dk, Hv, dv, K;
  };
  for (const Case c : {Case{1, 16, 128, 32, 128, 4}, Case{3, 16, 128, 32, 128, 4}, Case{2, 2, 64, 4, 32, 3}}) {
    const int64_t C = 2 * c.Hk * c.dk + c.Hv * c.dv;
    const float qs = 1.0f / std::sqrt(static_cast<float>(c.dk));
    const auto w = randn_bf16(C * c.K, 61, 0.5f), x = randn_bf16(c.N * C, 62, 1.0f);
    auto dw = to_device_bf16(pool, w), dx = to_device_bf16(pool, x);
    std::vector<DevArray<bf16>> tails_a, tails_b;
    std::vector<bf16*> ptrs;
    for (int64_t i = 0; i < c.N; ++i) {
      const auto t = randn_bf16((c.K - 1) * C, 63 + uint32_t(i));
      tails_a.push_back(to_device_bf16(pool, t));
      tails_b.push_back(to_device_bf16(pool, t));
      ptrs.push_back(tails_b.back().get());
    }
    DevArray<bf16*> dptrs(pool, ptrs);
    const int64_t kd = c.Hk * c.dk, vd = c.Hv * c.dv;
    DevArray<bf16> conv(pool, C), qa(pool, c.N * kd), ka(pool, c.N * kd), va(pool, c.N * vd), qb(pool, c.N * kd),
        kb(pool, c.N * kd), vb(pool, c.N * vd);
    for (int64_t i = 0; i < c.N; ++i) {
      causal_conv1d_silu(dx.get() + i * C, 1, C, dw.get(), c.K, tails_a[i].get(), conv.get(), st);
      gdn_split_qkv(conv.get(), 1, c.Hk, c.dk, c.Hv, c.dv, qs, 1e-6f, qa.get() + i * kd, ka.get() + i * kd,
                    va.get() + i * vd, st);
    }
    if (c.N == 1)
      gdn_conv_split_rows(dx.get(), 1, c.Hk, c.dk, c.Hv, c.dv, dw.get(), c.K, tails_b[0].get(), nullptr, qs, 1e-6f,
                          qb.get(), kb.get(), vb.get(), st);
    else
      gdn_conv_split_rows(dx.get(), c.N, c.Hk, c.dk, c.Hv, c.dv, dw.get(), c.K, nullptr, dptrs.get(), qs, 1e-6f,
                          qb.get(), kb.get(), vb.get(), st);
    st.synchronize();
    EXPECT_EQ(from_device_bf16(qa), from_device_bf16(qb)) << "q, N " << c.N;
    EXPECT_EQ(from_device_bf16(ka), from_device_bf16(kb)) << "k, N " << c.N;
    EXPECT_EQ(from_device_bf16(va), from_device_bf16(vb)) << "v, N " << c.N;
    for (int64_t i = 0; i < c.N; ++i)
      EXPECT_EQ(from_device_bf16(tails_a[i]), from_device_bf16(tails_b[i])) << "tail " << i << ", N " << c.N;
  }
}

// The conv, split and recurrent step in one launch give exactly what gdn_conv_split_rows then gdn_recurrent give:
// outputs, states and tails, over two steps (the second from the first's tails and states, after the arrival
// counters went back to zero), with one row's buffers and with pointer arrays; conv widths 4 (compiled) and 3, key
// and value dims that leave threads and columns idle.
TEST_F(CudaOps, GdnConvRecurrentRowsEqualsConvSplitThenRecurrent) {
  Stream st;
  struct Case {
    int64_t N, Hk, dk, Hv, dv, K;
  };
  for (const Case c : {Case{1, 16, 128, 32, 128, 4}, Case{3, 16, 128, 32, 128, 4}, Case{2, 2, 64, 4, 32, 3},
                       Case{2, 2, 100, 6, 48, 4}}) {
    const int64_t C = 2 * c.Hk * c.dk + c.Hv * c.dv, kd = c.Hk * c.dk, vd = c.Hv * c.dv, sz = c.Hv * c.dk * c.dv;
    const float qs = 1.0f / std::sqrt(static_cast<float>(c.dk));
    auto dw = to_device_bf16(pool, randn_bf16(C * c.K, 71, 0.5f));
    // a: the two ops; b: the fused one.
    std::vector<DevArray<bf16>> tails_a, tails_b;
    std::vector<DevArray<float>> states_a, states_b;
    std::vector<bf16*> ta, tb;
    std::vector<float*> sa, sb;
    for (int64_t i = 0; i < c.N; ++i) {
      const auto t = randn_bf16((c.K - 1) * C, 73 + uint32_t(i));
      const auto s0 = hypic::test::randn(sz, 83 + uint32_t(i), 0.3f);
      tails_a.push_back(to_device_bf16(pool, t));
      tails_b.push_back(to_device_bf16(pool, t));
      states_a.emplace_back(pool, s0);
      states_b.emplace_back(pool, s0);
      ta.push_back(tails_a.back().get());
      tb.push_back(tails_b.back().get());
      sa.push_back(states_a.back().get());
      sb.push_back(states_b.back().get());
    }
    DevArray<bf16*> dta(pool, ta), dtb(pool, tb);
    DevArray<float*> dsa(pool, sa), dsb(pool, sb);
    DevArray<int32_t> arrivals(pool, std::vector<int32_t>(c.N * c.Hk, 0));
    DevArray<bf16> q(pool, c.N * kd), k(pool, c.N * kd), v(pool, c.N * vd), oa(pool, c.N * vd), ob(pool, c.N * vd);
    const bool one = c.N == 1;
    for (int step = 0; step < 2; ++step) {
      auto x = to_device_bf16(pool, randn_bf16(c.N * C, 91 + uint32_t(step)));
      std::vector<float> gh(c.N * c.Hv), bh(c.N * c.Hv);
      for (size_t i = 0; i < gh.size(); ++i) {
        gh[i] = -0.05f - 0.6f * float((i * 37 + step * 11) % 17) / 17.0f;
        bh[i] = 0.1f + 0.8f * float((i * 13 + step * 5) % 11) / 11.0f;
      }
      DevArray<float> g(pool, gh), beta(pool, bh);
      gdn_conv_split_rows(x.get(), c.N, c.Hk, c.dk, c.Hv, c.dv, dw.get(), c.K, one ? ta[0] : nullptr,
                          one ? nullptr : dta.get(), qs, 1e-6f, q.get(), k.get(), v.get(), st);
      gdn_recurrent({1, c.N, c.Hv, c.Hk, c.dk, c.dv}, q.get(), k.get(), v.get(), g.get(), beta.get(),
                    one ? sa[0] : nullptr, oa.get(), st, one ? nullptr : dsa.get());
      gdn_conv_recurrent_rows(x.get(), c.N, c.Hk, c.dk, c.Hv, c.dv, dw.get(), c.K, one ? tb[0] : nullptr,
                              one ? nullptr : dtb.get(), qs, 1e-6f, g.get(), beta.get(), one ? sb[0] : nullptr,
                              one ? nullptr : dsb.get(), ob.get(), arrivals.get(), st);
      st.synchronize();
      const std::string at = "N " + std::to_string(c.N) + ", dk " + std::to_string(c.dk) + ", step " +
                             std::to_string(step);
      EXPECT_EQ(from_device_bf16(oa), from_device_bf16(ob)) << "outputs, " << at;
      for (int64_t i = 0; i < c.N; ++i) {
        EXPECT_EQ(states_a[i].download(), states_b[i].download()) << "state " << i << ", " << at;
        EXPECT_EQ(from_device_bf16(tails_a[i]), from_device_bf16(tails_b[i])) << "tail " << i << ", " << at;
      }
      EXPECT_EQ(arrivals.download(), std::vector<int32_t>(c.N * c.Hk, 0)) << at;
    }
  }
}

// qk_norm_rope gives exactly what the copy + rmsnorm + rope_apply sequence gives (the attention layer's
// prefill and decode both take it), at 35B-A3B's attention shape and with a plain (ungated) layout.
TEST_F(CudaOps, QkNormRopeEqualsSeparateOps) {
  Stream st;
  struct Case {
    int64_t T, H, Hkv, hd, rot;
    bool gated;
  };
  for (const Case c : {Case{1, 16, 2, 256, 64, true}, Case{37, 16, 2, 256, 64, true}, Case{5, 8, 4, 128, 128, false},
                       Case{3, 4, 2, 64, 32, false}}) {
    const int64_t qs = c.gated ? 2 * c.hd : c.hd;
    const auto qsrc = randn_bf16(c.T * c.H * qs, 41, 2.0f), k0 = randn_bf16(c.T * c.Hkv * c.hd, 42, 2.0f);
    const auto qn = hypic::test::randn(c.hd, 43, 0.3f), kn = hypic::test::randn(c.hd, 44, 0.3f);
    std::vector<int64_t> pos(c.T);
    for (int64_t t = 0; t < c.T; ++t) pos[t] = 1000 + 37 * t;
    auto dq = to_device_bf16(pool, qsrc);
    DevArray<float> dqn(pool, qn), dkn(pool, kn);
    DevArray<int64_t> dpos(pool, pos);
    DevArray<bf16> qa(pool, c.T * c.H * c.hd), qb(pool, c.T * c.H * c.hd);
    for (const bool zc : {true, false}) {
      auto dk = to_device_bf16(pool, k0);
      qk_norm_rope(dq.get(), qs, qa.get(), dk.get(), c.T, c.H, c.Hkv, c.hd, dqn.get(), dkn.get(), 1e-6f, zc, c.rot,
                   dpos.get(), 1e7, st);
      HYPIC_CUDA_CHECK(cudaMemcpy2DAsync(qb.get(), sizeof(bf16) * c.hd, dq.get(), sizeof(bf16) * qs,
                                         sizeof(bf16) * c.hd, c.T * c.H, cudaMemcpyDeviceToDevice, st));
      auto kb = to_device_bf16(pool, k0);
      rmsnorm(qb.get(), qb.get(), c.T * c.H, c.hd, dqn.get(), 1e-6f, zc, st);
      rmsnorm(kb.get(), kb.get(), c.T * c.Hkv, c.hd, dkn.get(), 1e-6f, zc, st);
      rope_apply(qb.get(), c.T, c.H, c.hd, c.rot, dpos.get(), 1e7, st);
      rope_apply(kb.get(), c.T, c.Hkv, c.hd, c.rot, dpos.get(), 1e7, st);
      st.synchronize();
      EXPECT_EQ(from_device_bf16(qa), from_device_bf16(qb)) << "queries, T " << c.T << " hd " << c.hd << " zc " << zc;
      EXPECT_EQ(from_device_bf16(dk), from_device_bf16(kb)) << "keys, T " << c.T << " hd " << c.hd << " zc " << zc;
    }
    // With the append: each row's keys, values and position land in its sequence's cache as the plain
    // call then kv_append_batched put them (rows past a cache's capacity, or of an empty one, dropped).
    const int64_t row = c.Hkv * c.hd, cap = 6;
    const auto v0 = randn_bf16(c.T * row, 45, 1.0f), stale = randn_bf16(cap * row, 46, 1.0f);
    auto dv = to_device_bf16(pool, v0);
    std::vector<DevArray<bf16>> caches;
    std::vector<DevArray<int64_t>> poss;
    std::vector<KvSlot> slots[2];
    for (int pass = 0; pass < 2; ++pass)
      for (int64_t t = 0; t < c.T; ++t) {
        caches.push_back(to_device_bf16(pool, stale));
        caches.push_back(to_device_bf16(pool, stale));
        poss.emplace_back(pool, std::vector<int64_t>(cap, -1));
        const int32_t rows = t % 5 == 3 ? 0 : (t % 5 == 4 ? int32_t(cap) + 1 : int32_t(1 + t % int64_t(cap)));
        slots[pass].push_back({caches[caches.size() - 2].get(), caches.back().get(), poss.back().get(), rows,
                               int32_t(cap)});
      }
    DevArray<KvSlot> s0(pool, slots[0]), s1(pool, slots[1]);
    auto dk = to_device_bf16(pool, k0);
    qk_norm_rope(dq.get(), qs, qa.get(), dk.get(), c.T, c.H, c.Hkv, c.hd, dqn.get(), dkn.get(), 1e-6f, true, c.rot,
                 dpos.get(), 1e7, st);
    kv_append_batched(dk.get(), dv.get(), dpos.get(), c.T, row, s0.get(), st);
    auto dk2 = to_device_bf16(pool, k0);
    const QkAppend app{dv.get(), s1.get()};
    qk_norm_rope(dq.get(), qs, qb.get(), dk2.get(), c.T, c.H, c.Hkv, c.hd, dqn.get(), dkn.get(), 1e-6f, true, c.rot,
                 dpos.get(), 1e7, st, &app);
    st.synchronize();
    EXPECT_EQ(from_device_bf16(qa), from_device_bf16(qb)) << "appending: queries, T " << c.T;
    EXPECT_EQ(from_device_bf16(dk2), k0) << "appending leaves k as it was";
    for (int64_t t = 0; t < c.T; ++t) {
      EXPECT_EQ(from_device_bf16(caches[2 * t]), from_device_bf16(caches[2 * (c.T + t)])) << "K cache " << t;
      EXPECT_EQ(from_device_bf16(caches[2 * t + 1]), from_device_bf16(caches[2 * (c.T + t) + 1])) << "V cache " << t;
      EXPECT_EQ(poss[t].download(), poss[c.T + t].download()) << "positions " << t;
    }
    // The append did write: a kept row's position is the row's.
    if (c.T >= 1) {
      EXPECT_EQ(poss[c.T].download()[0], pos[0]);
    }
  }
}

// A batched decode step's attention reads every cache row but the new one before its programmatic wait:
// the new row, which the norm/rotation kernel before it appends, must still be the appended one. The
// cache's new row holds large stale values beforehand, so a stale read would swamp the softmax. One
// sequence of 8200 keys under a bound of 16k (the serving step just past 8k: as many splits as a wave),
// the norm kernel letting the attention start before its own wait (the default); the norm kernel
// triggering after its wait (HYPIC_CUDA_QK_TRIGGER_FIRST=0); neither the wave nor the early tile
// (HYPIC_CUDA_DECODE_ATTN_WAVE=0); the norm kernel's slot, position and angles after its wait
// (HYPIC_CUDA_QK_PRE_ANGLES=0; before it by default).
TEST_F(CudaOps, AttentionDecodeBatchedReadsTheRowTheNormKernelAppends) {
  for (const char* form : {"default", "after the wait", "neither", "angles after the wait"}) {
    SCOPED_TRACE(form);
    const bool dflt = std::strcmp(form, "default") == 0, late = std::strcmp(form, "angles after the wait") == 0;
    setenv("HYPIC_CUDA_DECODE_ATTN_WAVE", std::strcmp(form, "neither") == 0 ? "0" : "1", 1);
    setenv("HYPIC_CUDA_QK_TRIGGER_FIRST", dflt || late ? "1" : "0", 1);
    setenv("HYPIC_CUDA_QK_PRE_ANGLES", late ? "0" : "1", 1);
    Stream st;
    const int64_t H = 16, Hkv = 2, hd = 256, rot = 64, row = Hkv * hd, rows = 8200, cap = 8300, bound = 16384;
    const auto qsrc = randn_bf16(H * 2 * hd, 61, 2.0f), knew = randn_bf16(row, 62, 2.0f), vnew = randn_bf16(row, 63);
    const auto qn = hypic::test::randn(hd, 64, 0.3f), kn = hypic::test::randn(hd, 65, 0.3f);
    auto k0 = randn_bf16(cap * row, 66), v0 = randn_bf16(cap * row, 67);
    std::fill(k0.begin() + (rows - 1) * row, k0.begin() + rows * row, 40.0f);
    std::fill(v0.begin() + (rows - 1) * row, v0.begin() + rows * row, 40.0f);
    std::vector<int64_t> pos0(cap);
    std::iota(pos0.begin(), pos0.end(), 0);
    pos0[rows - 1] = 0;  // stale: visible to the query
    const std::vector<int64_t> qpos = {rows - 1};
    auto dqsrc = to_device_bf16(pool, qsrc), dknew = to_device_bf16(pool, knew), dvnew = to_device_bf16(pool, vnew);
    DevArray<float> dqn(pool, qn), dkn(pool, kn);
    DevArray<int64_t> dqp(pool, qpos);
    const AttentionShape s{1, bound, H, Hkv, hd};
    DevArray<unsigned char> ws(pool, attention_decode_workspace_bytes(s));
    for (int rep = 0; rep < 3; ++rep) {
      auto dk = to_device_bf16(pool, k0), dv = to_device_bf16(pool, v0);
      DevArray<int64_t> dp(pool, pos0);
      DevArray<KvSlot> slot(pool, std::vector<KvSlot>{{dk.get(), dv.get(), dp.get(), int32_t(rows), int32_t(cap)}});
      DevArray<bf16> q(pool, H * hd), out(pool, H * hd);
      const QkAppend app{dvnew.get(), slot.get()};
      qk_norm_rope(dqsrc.get(), 2 * hd, q.get(), dknew.get(), 1, H, Hkv, hd, dqn.get(), dkn.get(), 1e-6f, true, rot,
                   dqp.get(), 1e7, st, &app);
      attention_decode_batched(s, q.get(), slot.get(), dqp.get(), 1.0f / 16.0f, out.get(), ws.get(), st);
      st.synchronize();
      const auto kc = from_device_bf16(dk), vc = from_device_bf16(dv), qh = from_device_bf16(q);
      const auto pc = dp.download();
      EXPECT_EQ(pc[rows - 1], rows - 1) << "the append wrote the new row's position";
      EXPECT_NE(kc[(rows - 1) * row], 40.0f) << "the append wrote the new row";
      std::vector<float> ref(H * hd);
      cpu::attention({1, rows, H, Hkv, hd, hd}, qh.data(), kc.data(), vc.data(), qpos.data(), pc.data(), 1.0f / 16.0f,
                     ref.data());
      HYPIC_EXPECT_ERR_LT(rel_err(from_device_bf16(out), ref), kTolBf16Out) << "repeat " << rep;
    }
    unsetenv("HYPIC_CUDA_DECODE_ATTN_WAVE");
    unsetenv("HYPIC_CUDA_QK_TRIGGER_FIRST");
    unsetenv("HYPIC_CUDA_QK_PRE_ANGLES");
  }
}

// The combine pass with every load of a thread issued at once (HYPIC_CUDA_COMBINE_ONE_TRIP=1) against its loops,
// bit for bit: a decode row just past 8k keys under a 16k bound (132 or 128
// splits), a few keys under that bound (most splits empty), d 128 and 256, one query row and three; then against
// the CPU attention.
TEST_F(CudaOps, SplitCombineOneTripGivesTheSameBits) {
  Stream st;
  struct Case {
    int64_t Tq, H, Hkv, hd, keys;
  };
  int seed = 90;
  for (const Case c : {Case{1, 16, 2, 256, 8200}, Case{1, 16, 2, 256, 40}, Case{3, 16, 2, 256, 3000},
                       Case{1, 8, 1, 128, 5000}, Case{2, 4, 4, 128, 700}}) {
    SCOPED_TRACE("Tq " + std::to_string(c.Tq) + " H " + std::to_string(c.H) + " keys " + std::to_string(c.keys));
    const int64_t row = c.Hkv * c.hd, bound = 16384;
    const auto qh = randn_bf16(c.Tq * c.H * c.hd, ++seed, 2.0f), kc = randn_bf16(c.keys * row, ++seed),
               vc = randn_bf16(c.keys * row, ++seed);
    std::vector<int64_t> kpos(c.keys), qpos(c.Tq);
    std::iota(kpos.begin(), kpos.end(), 0);
    for (int64_t t = 0; t < c.Tq; ++t) qpos[t] = c.keys - 1 - 5 * t;
    auto dq = to_device_bf16(pool, qh), dk = to_device_bf16(pool, kc), dv = to_device_bf16(pool, vc);
    DevArray<int64_t> dkp(pool, kpos), dqp(pool, qpos);
    DevArray<int32_t> keys(pool, std::vector<int32_t>{int32_t(c.keys)});
    const AttentionShape shape{c.Tq, bound, c.H, c.Hkv, c.hd};
    DevArray<unsigned char> ws(pool, attention_decode_workspace_bytes(shape));
    const float scale = 1.0f / std::sqrt(float(c.hd));
    std::vector<std::vector<float>> outs;
    for (const char* form : {"0", "1"}) {
      setenv("HYPIC_CUDA_COMBINE_ONE_TRIP", form, 1);
      DevArray<bf16> out(pool, c.Tq * c.H * c.hd);
      attention_decode(shape, dq.get(), dk.get(), dv.get(), dqp.get(), dkp.get(), scale, out.get(), ws.get(), st,
                       keys.get());
      st.synchronize();
      outs.push_back(from_device_bf16(out));
    }
    unsetenv("HYPIC_CUDA_COMBINE_ONE_TRIP");
    EXPECT_EQ(outs[1], outs[0]);
    std::vector<float> ref(c.Tq * c.H * c.hd);
    cpu::attention({c.Tq, c.keys, c.H, c.Hkv, c.hd, c.hd}, qh.data(), kc.data(), vc.data(), qpos.data(), kpos.data(),
                   scale, ref.data());
    HYPIC_EXPECT_ERR_LT(rel_err(outs[1], ref), kTolBf16Out);
  }
}

// The batched attention given the step's new rows unnormed (HYPIC_CUDA_DECODE_ATTN_FOLD=1) against
// qk_norm_rope with the append and then the attention, bit for bit: the outputs and every cache (keys, values,
// positions). Each new row holds stale 40s before the step, so a walk that read it before the append would
// differ. One sequence just past 8k keys under a 16k bound, and three sequences of other lengths (one of a
// single key); d 256 with 16 query heads over 2 (gated queries, as Qwen3.5) and d 128 with 8 over 1.
TEST_F(CudaOps, AttentionDecodeFoldedNormGivesTheSameBitsAndCaches) {
  setenv("HYPIC_CUDA_DECODE_ATTN_FOLD", "1", 1);
  Stream st;
  struct Case {
    int64_t H, Hkv, hd, rot;
    bool gated, zc;
    std::vector<int32_t> rows;
  };
  int seed = 110;
  for (const Case& c : {Case{16, 2, 256, 64, true, true, {8200}}, Case{16, 2, 256, 64, true, false, {700, 1, 4100}},
                        Case{8, 1, 128, 64, false, true, {3000, 50}}}) {
    const int64_t N = int64_t(c.rows.size()), row = c.Hkv * c.hd, qs = c.gated ? 2 * c.hd : c.hd, bound = 16384;
    SCOPED_TRACE("N " + std::to_string(N) + " hd " + std::to_string(c.hd));
    ASSERT_TRUE(attention_decode_folds(c.H, c.Hkv, c.hd, c.rot));
    const auto qsrc = randn_bf16(N * c.H * qs, ++seed, 2.0f), knew = randn_bf16(N * row, ++seed, 2.0f),
               vnew = randn_bf16(N * row, ++seed);
    const auto qn = hypic::test::randn(c.hd, ++seed, 0.3f), kn = hypic::test::randn(c.hd, ++seed, 0.3f);
    auto dqsrc = to_device_bf16(pool, qsrc), dvnew = to_device_bf16(pool, vnew);
    DevArray<float> dqn(pool, qn), dkn(pool, kn);
    std::vector<int64_t> qpos(N);
    for (int64_t n = 0; n < N; ++n) qpos[n] = c.rows[n] - 1;
    DevArray<int64_t> dqp(pool, qpos);
    const AttentionShape shape{N, bound, c.H, c.Hkv, c.hd};
    DevArray<unsigned char> ws(pool, attention_decode_workspace_bytes(shape));
    const float scale = 1.0f / std::sqrt(float(c.hd));
    // Two copies of every cache: one for each path.
    std::vector<DevArray<bf16>> kc, vc;
    std::vector<DevArray<int64_t>> pc;
    std::vector<KvSlot> slots[2];
    for (int path = 0; path < 2; ++path)
      for (int64_t n = 0; n < N; ++n) {
        const int64_t cap = c.rows[n] + 5;
        auto k0 = randn_bf16(cap * row, 200 + n), v0 = randn_bf16(cap * row, 300 + n);
        std::fill(k0.begin() + (c.rows[n] - 1) * row, k0.begin() + c.rows[n] * row, 40.0f);
        std::fill(v0.begin() + (c.rows[n] - 1) * row, v0.begin() + c.rows[n] * row, 40.0f);
        std::vector<int64_t> p0(cap);
        std::iota(p0.begin(), p0.end(), 0);
        p0[c.rows[n] - 1] = 0;  // stale: visible to the query
        kc.push_back(to_device_bf16(pool, k0));
        vc.push_back(to_device_bf16(pool, v0));
        pc.emplace_back(pool, p0);
        slots[path].push_back({kc.back().get(), vc.back().get(), pc.back().get(), c.rows[n], int32_t(cap)});
      }
    DevArray<KvSlot> s0(pool, slots[0]), s1(pool, slots[1]);
    std::vector<std::vector<float>> outs;
    for (int rep = 0; rep < 2; ++rep) {  // the second step re-appends the same row: the same bits again
      DevArray<bf16> qa(pool, N * c.H * c.hd), oa(pool, N * c.H * c.hd), ob(pool, N * c.H * c.hd);
      auto dk = to_device_bf16(pool, knew);
      const QkAppend app{dvnew.get(), s0.get()};
      qk_norm_rope(dqsrc.get(), qs, qa.get(), dk.get(), N, c.H, c.Hkv, c.hd, dqn.get(), dkn.get(), 1e-6f, c.zc, c.rot,
                   dqp.get(), 1e7, st, &app);
      attention_decode_batched(shape, qa.get(), s0.get(), dqp.get(), scale, oa.get(), ws.get(), st);
      auto dk2 = to_device_bf16(pool, knew);
      const DecodeNewRows nr{.q_src = dqsrc.get(),
                             .q_stride = qs,
                             .k = dk2.get(),
                             .v = dvnew.get(),
                             .q_norm = dqn.get(),
                             .k_norm = dkn.get(),
                             .eps = 1e-6f,
                             .zero_centred = c.zc,
                             .rot_dim = c.rot,
                             .theta = 1e7};
      attention_decode_batched(shape, nr, s1.get(), dqp.get(), scale, ob.get(), ws.get(), st);
      st.synchronize();
      EXPECT_EQ(from_device_bf16(ob), from_device_bf16(oa)) << "outputs, step " << rep;
      EXPECT_EQ(from_device_bf16(dk2), knew) << "the new keys are left as they were";
      outs.push_back(from_device_bf16(ob));
    }
    EXPECT_EQ(outs[1], outs[0]);
    for (int64_t n = 0; n < N; ++n) {
      EXPECT_EQ(from_device_bf16(kc[N + n]), from_device_bf16(kc[n])) << "K cache " << n;
      EXPECT_EQ(from_device_bf16(vc[N + n]), from_device_bf16(vc[n])) << "V cache " << n;
      EXPECT_EQ(pc[N + n].download(), pc[n].download()) << "positions " << n;
      EXPECT_EQ(pc[N + n].download()[c.rows[n] - 1], qpos[n]) << "the append wrote the position " << n;
    }
  }
  unsetenv("HYPIC_CUDA_DECODE_ATTN_FOLD");
}

}  // namespace
}  // namespace hypic::cuda::test
