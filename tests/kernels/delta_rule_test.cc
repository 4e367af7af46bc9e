#include "kernels/delta_rule.h"

#include <gtest/gtest.h>

#include "kernels/transfer_operator.h"
#include "tests/kernels/test_util.h"

namespace hypic::cpu {
namespace {

using test::rel_err;

struct Inputs {
  DeltaRuleShape s;
  std::vector<float> q, k, v, g, beta;
};

Inputs make(int64_t T, int64_t H, int64_t dk, int64_t dv, uint32_t seed) {
  Inputs in{{T, H, dk, dv}, test::randn(T * H * dk, seed), test::randn(T * H * dk, seed + 1),
            test::randn(T * H * dv, seed + 2), test::uniform(T * H, seed + 3, -0.7f, -0.01f),
            test::uniform(T * H, seed + 4, 0.05f, 0.95f)};
  test::l2norm_heads(in.q, dk);
  test::l2norm_heads(in.k, dk);
  return in;
}

TEST(DeltaRule, ChunkedEqualsRecurrentAcrossChunks) {
  for (int64_t T : {1, 17, 64, 150}) {
    Inputs in = make(T, 3, 16, 24, 7);
    std::vector<float> s0 = test::randn(3 * 16 * 24, 99, 0.3f), s1 = s0;
    std::vector<float> o0(T * 3 * 24), o1(T * 3 * 24);
    delta_rule_recurrent(in.s, in.q.data(), in.k.data(), in.v.data(), in.g.data(), in.beta.data(), s0.data(), o0.data());
    delta_rule_chunked(in.s, in.q.data(), in.k.data(), in.v.data(), in.g.data(), in.beta.data(), s1.data(), o1.data(),
                       32);
    EXPECT_LT(rel_err(o1, o0), 1e-5f) << "T=" << T;
    EXPECT_LT(rel_err(s1, s0), 1e-5f) << "T=" << T;
  }
}

// Composition law (DESIGN §1.2) for the dense shape: S(C1C2 | S0) = T2 (T1 S0 + S1) + S2.
TEST(DeltaRule, DenseTransferComposesExactly) {
  const int64_t H = 2, dk = 16, dv = 24, n1 = 37, n2 = 29;
  Inputs in = make(n1 + n2, H, dk, dv, 11);
  const TransferShape ts{TransferKind::Dense, H, dk, dv};
  const std::vector<float> S0 = test::randn(H * dk * dv, 5, 0.5f);

  std::vector<float> ref = S0;  // ground truth: run C1C2 from S0
  delta_rule_recurrent({n1 + n2, H, dk, dv}, in.q.data(), in.k.data(), in.v.data(), in.g.data(), in.beta.data(),
                       ref.data(), nullptr);

  auto seg = [&](int64_t off, int64_t n, std::vector<float>& T, std::vector<float>& S) {
    T.assign(transfer_numel(ts), 0.0f);
    transfer_identity(ts, T.data());
    S.assign(H * dk * dv, 0.0f);
    const float* k = in.k.data() + off * H * dk;
    delta_rule_chunked({n, H, dk, dv}, in.q.data() + off * H * dk, k, in.v.data() + off * H * dv, in.g.data() + off * H,
                       in.beta.data() + off * H, S.data(), nullptr, 16);
    delta_rule_transfer(n, H, dk, k, in.g.data() + off * H, in.beta.data() + off * H, T.data());
  };
  std::vector<float> T1, S1, T2, S2;
  seg(0, n1, T1, S1);
  seg(n1, n2, T2, S2);

  std::vector<float> out(H * dk * dv);
  transfer_apply(ts, T1.data(), S0.data(), S1.data(), out.data());
  transfer_apply(ts, T2.data(), out.data(), S2.data(), out.data());
  EXPECT_LT(rel_err(out, ref), 1e-5f);

  // Folding the operators first gives the same state.
  std::vector<float> T12(transfer_numel(ts)), S12(H * dk * dv);
  transfer_compose(ts, T2.data(), T1.data(), T12.data());
  transfer_apply(ts, T2.data(), S1.data(), S2.data(), S12.data());
  transfer_apply(ts, T12.data(), S0.data(), S12.data(), out.data());
  EXPECT_LT(rel_err(out, ref), 1e-5f);

  // The naive ablation (S0 + S1 + S2) is far off: the law is not vacuous.
  std::vector<float> naive(H * dk * dv);
  for (size_t i = 0; i < naive.size(); ++i) naive[i] = S0[i] + S1[i] + S2[i];
  EXPECT_GT(rel_err(naive, ref), 1e-2f);
}

}  // namespace
}  // namespace hypic::cpu
