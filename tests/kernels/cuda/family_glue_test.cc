// The glue ops of the Ring / MiniMax / Kimi-Linear / Ring-2.5 forward passes (kernels/cuda/family_glue.h)
// against the CPU reference: the router against kernels/moe_route.h, the rest against the CPU backend's
// formulas written with the CPU ops (kernels/norm.h, kernels/activation.h, kernels/transfer_operator.h).
#include <cmath>

#include "kernels/activation.h"
#include "kernels/cuda/family_glue.h"
#include "kernels/moe_route.h"
#include "kernels/norm.h"
#include "kernels/transfer_operator.h"
#include "tests/kernels/cuda/harness.h"
#include "tests/kernels/test_util.h"

namespace hypic::cuda::test {
namespace {

using hypic::test::rel_err;

constexpr float kTolBf16Out = 1.2e-2f;  // one bf16 rounding of the output, fp32 math

TEST_F(CudaOps, RouteSigmoidGroupMatchesCpu) {
  Stream st;
  struct Case {
    int64_t T, E, K, G, topk;
    bool mask_inf, renorm;
  };
  // Ring's fixture (12 experts, 3 groups, keep 2), Ring-mini / Kimi-Linear (256, 8 groups or 1), top-1.
  for (const Case c : {Case{37, 12, 3, 3, 2, false, true}, Case{300, 256, 8, 8, 4, false, true},
                       Case{300, 256, 8, 8, 4, true, true}, Case{65, 256, 8, 1, 1, true, true},
                       Case{20, 64, 1, 4, 2, true, false}, Case{9, 8, 2, 2, 1, true, true}}) {
    const auto logits = hypic::test::randn(c.T * c.E, 11, 2.0f);
    const auto bias = hypic::test::randn(c.E, 12, 0.3f);
    std::vector<int32_t> ids(c.T * c.K);
    std::vector<float> w(c.T * c.K);
    cpu::moe_route_sigmoid_group(logits.data(), bias.data(), c.T, c.E, c.K, c.G, c.topk, c.mask_inf, c.renorm, 2.5f,
                                 ids.data(), w.data());
    DevArray<float> dl(pool, logits), db(pool, bias), dw(pool, c.T * c.K);
    DevArray<int32_t> di(pool, c.T * c.K);
    moe_route_sigmoid_group(dl.get(), db.get(), c.T, c.E, c.K, c.G, c.topk, c.mask_inf, c.renorm, 2.5f, di.get(),
                            dw.get(), st);
    EXPECT_EQ(di.download(), ids) << "E " << c.E << " K " << c.K << " groups " << c.G;
    HYPIC_EXPECT_ERR_LT(rel_err(dw.download(), w), 1e-5f) << "E " << c.E;
  }
}

TEST_F(CudaOps, GroupRmsnormGateMatchesCpu) {
  Stream st;
  for (const auto& [rows, width, groups] : {std::tuple<int64_t, int64_t, int64_t>{37, 64, 2}, {300, 2048, 4},
                                           {5, 96, 1}, {64, 6144, 1}}) {
    const auto o = randn_bf16(rows * width, 21, 2.0f), z = randn_bf16(rows * width, 22);
    const auto w = hypic::test::randn(width, 23, 0.5f);
    std::vector<float> ref(o.size());
    const int64_t gw = width / groups;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < groups; ++j)
        cpu::rmsnorm(o.data() + r * width + j * gw, ref.data() + r * width + j * gw, 1, gw, w.data() + j * gw, 1e-6f,
                     false);
    for (size_t i = 0; i < ref.size(); ++i) ref[i] *= 0.8f * cpu::sigmoid(z[i]);
    auto dox = to_device_bf16(pool, o), dz = to_device_bf16(pool, z);
    DevArray<float> dw(pool, w);
    group_rmsnorm_gate(dox.get(), dz.get(), rows, width, groups, dw.get(), 1e-6f, 0.8f, st);
    HYPIC_EXPECT_ERR_LT(rel_err(from_device_bf16(dox), ref), kTolBf16Out) << width << " / " << groups;
  }
}

TEST_F(CudaOps, RmsnormIntoResidualMatchesCpu) {
  Stream st;
  const int64_t rows = 33, dim = 320;
  const auto h = hypic::test::randn(rows * dim, 31, 3.0f), w = hypic::test::randn(dim, 32, 0.5f);
  std::vector<float> ref(h.size());
  cpu::rmsnorm(h.data(), ref.data(), rows, dim, w.data(), 1e-6f, false);
  DevArray<float> dh(pool, h), dw(pool, w);
  DevArray<bf16> dx(pool, h.size());
  rmsnorm_into_residual(dh.get(), dx.get(), rows, dim, dw.get(), 1e-6f, false, 1.5f, st);
  HYPIC_EXPECT_ERR_LT(rel_err(from_device_bf16(dx), ref), kTolBf16Out);
  for (float& x : ref) x *= 1.5f;
  HYPIC_EXPECT_ERR_LT(rel_err(dh.download(), ref), 1e-6f);
}

TEST_F(CudaOps, KdaGatesMatchCpu) {
  Stream st;
  const int64_t T = 70, H = 4, dk = 32;
  const auto f = hypic::test::randn(T * H * dk, 41, 3.0f), b = hypic::test::randn(T * H, 42, 2.0f);
  const auto A_log = hypic::test::randn(H, 43, 1.0f), dt = hypic::test::randn(H * dk, 44, 1.0f);
  for (float lb : {0.0f, -5.0f}) {  // Kimi's softplus gate, Ring-2.5's bounded gate
    std::vector<float> g(f.size()), beta(b.size());
    for (int64_t i = 0; i < T * H * dk; ++i) {
      const int64_t c = i % (H * dk), h = c / dk;
      const float a = std::exp(A_log[h]), x = f[i] + dt[c];
      g[i] = lb < 0 ? lb * cpu::sigmoid(a * x) : -a * cpu::softplus(x);
    }
    for (size_t i = 0; i < b.size(); ++i) beta[i] = cpu::sigmoid(b[i]);
    DevArray<float> dg(pool, f), dbeta(pool, b), da(pool, A_log), ddt(pool, dt);
    kda_gates(dg.get(), dbeta.get(), T, H, dk, da.get(), ddt.get(), lb, st);
    HYPIC_EXPECT_ERR_LT(rel_err(dg.download(), g), 1e-5f) << "lower bound " << lb;
    HYPIC_EXPECT_ERR_LT(rel_err(dbeta.download(), beta), 1e-6f);
  }
}

TEST_F(CudaOps, MlaRowsFollowTheCpuLayout) {
  Stream st;
  const int64_t T = 9, H = 3, R = 32, nope = 16, rope = 8, dv = 12, hd = nope + rope;
  const auto qp = randn_bf16(T * H * hd, 51), lat = randn_bf16(T * (R + rope), 52);
  const auto kv = randn_bf16(T * H * (nope + dv), 53);
  auto dqp = to_device_bf16(pool, qp), dlat = to_device_bf16(pool, lat), dkv = to_device_bf16(pool, kv);
  DevArray<bf16> dq(pool, T * H * hd), dk(pool, T * H * hd), dvv(pool, T * H * hd);
  for (bool deint : {true, false}) {
    // The CPU backend's layout: [rope | nope], the rope part's pairs to halves when rotated.
    auto rope_part = [&](const float* src, int64_t d) {
      return deint ? (d < rope / 2 ? src[2 * d] : src[2 * (d - rope / 2) + 1]) : src[d];
    };
    std::vector<float> q(T * H * hd), k(T * H * hd), v(T * H * hd, 0.0f);
    for (int64_t t = 0; t < T; ++t)
      for (int64_t h = 0; h < H; ++h) {
        const float* qs = qp.data() + (t * H + h) * hd;
        const float* ks = kv.data() + (t * H + h) * (nope + dv);
        float *qd = q.data() + (t * H + h) * hd, *kd = k.data() + (t * H + h) * hd, *vd = v.data() + (t * H + h) * hd;
        for (int64_t d = 0; d < rope; ++d) {
          qd[d] = rope_part(qs + nope, d);
          kd[d] = rope_part(lat.data() + t * (R + rope) + R, d);
        }
        for (int64_t d = 0; d < nope; ++d) {
          qd[rope + d] = qs[d];
          kd[rope + d] = ks[d];
        }
        for (int64_t d = 0; d < dv; ++d) vd[d] = ks[nope + d];
      }
    mla_queries(dqp.get(), T, H, nope, rope, deint, dq.get(), st);
    mla_keys_values(dlat.get(), R + rope, R, dkv.get(), T, H, nope, rope, dv, deint, dk.get(), dvv.get(), st);
    EXPECT_EQ(from_device_bf16(dq), q) << deint;
    EXPECT_EQ(from_device_bf16(dk), k) << deint;
    EXPECT_EQ(from_device_bf16(dvv), v) << deint;
  }
}

TEST_F(CudaOps, HeadGateAndScaleMatchCpu) {
  Stream st;
  const int64_t rows = 40, dim = 24;
  const auto x = randn_bf16(rows * dim, 61), gate = hypic::test::randn(rows, 62, 2.0f);
  std::vector<float> ref(x);
  for (int64_t i = 0; i < rows * dim; ++i) ref[i] *= cpu::sigmoid(gate[i / dim]) * 0.9f;
  auto dx = to_device_bf16(pool, x);
  DevArray<float> dg(pool, gate);
  head_sigmoid_scale(dx.get(), dg.get(), rows, dim, st);
  scale_bf16(dx.get(), 0.9f, rows * dim, st);
  HYPIC_EXPECT_ERR_LT(rel_err(from_device_bf16(dx), ref), kTolBf16Out);
}

TEST_F(CudaOps, ScalarTransferMatchesCpu) {
  Stream st;
  const int64_t H = 16, dk = 8, dv = 8, n = 5000;
  const cpu::TransferShape ts{cpu::TransferKind::Scalar, H, dk, dv};
  std::vector<float> log_a(H);
  for (int64_t h = 0; h < H; ++h) log_a[h] = -std::pow(2.0f, -8.0f * (h + 1) / H);
  std::vector<float> per_token(n * H);
  for (int64_t t = 0; t < n; ++t) std::copy(log_a.begin(), log_a.end(), per_token.begin() + t * H);
  std::vector<float> T_ref(H);
  cpu::transfer_identity(ts, T_ref.data());
  cpu::gated_linear_transfer(ts, n, per_token.data(), T_ref.data());
  DevArray<float> dT(pool, std::vector<float>(H, 1.0f)), dlog(pool, log_a);
  scalar_transfer_extend(dT.get(), dlog.get(), H, n, st);
  const auto T_dev = dT.download();
  HYPIC_EXPECT_ERR_LT(rel_err(T_dev, T_ref), 1e-5f);
  const auto S0 = hypic::test::randn(H * dk * dv, 71), body = hypic::test::randn(H * dk * dv, 72);
  std::vector<float> out(S0.size());
  cpu::transfer_apply(ts, T_dev.data(), S0.data(), body.data(), out.data());
  DevArray<float> dS(pool, S0), dbody(pool, body);
  scalar_transfer_apply(dS.get(), dT.get(), dbody.get(), H, dk * dv, st);
  HYPIC_EXPECT_ERR_LT(rel_err(dS.download(), out), 1e-6f);
  for (size_t i = 0; i < out.size(); ++i) out[i] += body[i];  // naive: S + body
  scalar_transfer_apply(dS.get(), nullptr, dbody.get(), H, dk * dv, st);
  HYPIC_EXPECT_ERR_LT(rel_err(dS.download(), out), 1e-6f);
}

}  // namespace
}  // namespace hypic::cuda::test
