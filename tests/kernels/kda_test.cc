// Kimi Delta Attention (per-channel gated delta rule): its transfer operator obeys the composition law
// S(C | S0) = T_C S0 + S(C | 0), equals the state of a run from S0 = I with v = 0 (how the reference
// note obtains it from the recurrence alone), is not symmetric, and the recurrence reduces to the Gated
// DeltaNet kernel when every channel of a head shares one gate.
#include "kernels/kda.h"

#include <gtest/gtest.h>

#include "kernels/delta_rule.h"
#include "kernels/transfer_operator.h"
#include "tests/kernels/test_util.h"

namespace hypic::cpu {
namespace {

using test::rel_err;

struct Inputs {
  int64_t T, H, dk, dv;
  std::vector<float> q, k, v, g, beta;
};

Inputs inputs(int64_t T, int64_t H, int64_t dk, int64_t dv) {
  Inputs in{T, H, dk, dv, test::randn(T * H * dk, 1), test::randn(T * H * dk, 2), test::randn(T * H * dv, 3),
            test::uniform(T * H * dk, 4, -0.6f, -0.01f), test::uniform(T * H, 5, 0.1f, 0.9f)};
  test::l2norm_heads(in.q, dk);
  test::l2norm_heads(in.k, dk);
  return in;
}

std::vector<float> identity(int64_t H, int64_t dk) {
  std::vector<float> I(H * dk * dk);
  transfer_identity({TransferKind::Dense, H, dk, dk}, I.data());
  return I;
}

TEST(Kda, SegmentsComposeExactly) {
  const Inputs in = inputs(37, 3, 8, 12);
  const TransferShape ts{TransferKind::Dense, in.H, in.dk, in.dv};
  const int64_t n1 = 22, n2 = in.T - n1;
  const auto S0 = test::randn(state_numel(ts), 6);
  std::vector<float> ref = S0;
  kda_recurrent({in.T, in.H, in.dk, in.dv}, in.q.data(), in.k.data(), in.v.data(), in.g.data(), in.beta.data(),
                ref.data(), nullptr);

  auto seg = [&](int64_t off, int64_t n, std::vector<float>& Tm, std::vector<float>& S) {
    Tm = identity(in.H, in.dk);
    S.assign(state_numel(ts), 0.0f);
    const int64_t a = off * in.H * in.dk;
    kda_recurrent({n, in.H, in.dk, in.dv}, in.q.data() + a, in.k.data() + a, in.v.data() + off * in.H * in.dv,
                  in.g.data() + a, in.beta.data() + off * in.H, S.data(), nullptr);
    kda_transfer(n, in.H, in.dk, in.k.data() + a, in.g.data() + a, in.beta.data() + off * in.H, Tm.data());
  };
  std::vector<float> T1, S1, T2, S2, out(state_numel(ts));
  seg(0, n1, T1, S1);
  seg(n1, n2, T2, S2);
  transfer_apply(ts, T1.data(), S0.data(), S1.data(), out.data());
  transfer_apply(ts, T2.data(), out.data(), S2.data(), out.data());
  EXPECT_LT(rel_err(out, ref), 1e-5f);

  // T_{C1 C2} = T_{C2} T_{C1}, and the composed pair gives the same state.
  std::vector<float> T12(transfer_numel(ts)), S12(state_numel(ts));
  transfer_compose(ts, T2.data(), T1.data(), T12.data());
  transfer_apply(ts, T2.data(), S1.data(), S2.data(), S12.data());
  transfer_apply(ts, T12.data(), S0.data(), S12.data(), out.data());
  EXPECT_LT(rel_err(out, ref), 1e-5f);
  // The naive sum (no T) is far off: the test would be vacuous otherwise.
  std::vector<float> naive = S0;
  for (size_t i = 0; i < naive.size(); ++i) naive[i] += S1[i] + S2[i];
  EXPECT_GT(rel_err(naive, ref), 1e-2f);
}

TEST(Kda, TransferIsTheStateOfARunFromIdentityWithZeroValues) {
  const Inputs in = inputs(19, 2, 16, 16);
  std::vector<float> Tm = identity(in.H, in.dk);
  kda_transfer(in.T, in.H, in.dk, in.k.data(), in.g.data(), in.beta.data(), Tm.data());
  std::vector<float> S = identity(in.H, in.dk);
  const std::vector<float> zero_v(in.v.size(), 0.0f);
  kda_recurrent({in.T, in.H, in.dk, in.dv}, in.q.data(), in.k.data(), zero_v.data(), in.g.data(), in.beta.data(),
                S.data(), nullptr);
  EXPECT_LT(rel_err(Tm, S), 1e-6f);
}

TEST(Kda, OneTokenTransitionIsNotSymmetric) {
  // A = (I - beta k k^T) diag(exp g): symmetric only when the channel gates are equal (Gated DeltaNet).
  const Inputs in = inputs(1, 1, 8, 8);
  auto asymmetry = [&](const std::vector<float>& g) {
    std::vector<float> A = identity(1, in.dk);
    kda_transfer(1, 1, in.dk, in.k.data(), g.data(), in.beta.data(), A.data());
    float m = 0;
    for (int64_t i = 0; i < in.dk; ++i)
      for (int64_t j = 0; j < in.dk; ++j) m = std::max(m, std::fabs(A[i * in.dk + j] - A[j * in.dk + i]));
    return m;
  };
  EXPECT_GT(asymmetry(in.g), 1e-3f);
  EXPECT_LT(asymmetry(std::vector<float>(in.dk, -0.3f)), 1e-7f);
}

TEST(Kda, SharedChannelGateReducesToGatedDeltaNet) {
  Inputs in = inputs(29, 3, 8, 12);
  const std::vector<float> g_head = test::uniform(in.T * in.H, 7, -0.5f, -0.01f);
  for (int64_t r = 0; r < in.T * in.H; ++r)
    for (int64_t i = 0; i < in.dk; ++i) in.g[r * in.dk + i] = g_head[r];
  const DeltaRuleShape s{in.T, in.H, in.dk, in.dv};
  const auto S0 = test::randn(in.H * in.dk * in.dv, 8);
  std::vector<float> Sk = S0, Sg = S0, ok(in.T * in.H * in.dv), og(in.T * in.H * in.dv);
  kda_recurrent(s, in.q.data(), in.k.data(), in.v.data(), in.g.data(), in.beta.data(), Sk.data(), ok.data());
  delta_rule_chunked(s, in.q.data(), in.k.data(), in.v.data(), g_head.data(), in.beta.data(), Sg.data(), og.data());
  EXPECT_LT(rel_err(ok, og), 1e-5f);
  EXPECT_LT(rel_err(Sk, Sg), 1e-5f);
  std::vector<float> Tk = identity(in.H, in.dk), Tg = identity(in.H, in.dk);
  kda_transfer(in.T, in.H, in.dk, in.k.data(), in.g.data(), in.beta.data(), Tk.data());
  delta_rule_transfer(in.T, in.H, in.dk, in.k.data(), g_head.data(), in.beta.data(), Tg.data());
  EXPECT_LT(rel_err(Tk, Tg), 1e-5f);
}

}  // namespace
}  // namespace hypic::cpu
