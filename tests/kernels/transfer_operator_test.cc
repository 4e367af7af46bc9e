// Composition law for the scalar and diagonal transfer shapes (synthetic gated linear attention, the
// recurrence of Lightning / GLA families), and RoPE re-rotation of states and keys.
#include "kernels/transfer_operator.h"

#include <gtest/gtest.h>

#include <numeric>

#include "kernels/rope.h"
#include "tests/kernels/test_util.h"

namespace hypic::cpu {
namespace {

using test::rel_err;

class GatedScan : public ::testing::TestWithParam<TransferKind> {};

TEST_P(GatedScan, SegmentsComposeExactly) {
  const TransferShape ts{GetParam(), 3, 8, 12};
  const int64_t n1 = 21, n2 = 13, T = n1 + n2;
  const int64_t per_tok = ts.kind == TransferKind::Scalar ? ts.H : ts.H * ts.dk;
  const auto q = test::randn(T * ts.H * ts.dk, 1), k = test::randn(T * ts.H * ts.dk, 2),
             v = test::randn(T * ts.H * ts.dv, 3);
  const auto log_a = test::uniform(T * per_tok, 4, -0.3f, -0.01f);
  const auto S0 = test::randn(state_numel(ts), 5);

  std::vector<float> ref = S0, out_ref(T * ts.H * ts.dv);
  gated_linear_scan(ts, T, q.data(), k.data(), v.data(), log_a.data(), ref.data(), out_ref.data());

  auto seg = [&](int64_t off, int64_t n, std::vector<float>& Tm, std::vector<float>& S) {
    Tm.assign(transfer_numel(ts), 0.0f);
    transfer_identity(ts, Tm.data());
    S.assign(state_numel(ts), 0.0f);
    gated_linear_scan(ts, n, q.data() + off * ts.H * ts.dk, k.data() + off * ts.H * ts.dk,
                      v.data() + off * ts.H * ts.dv, log_a.data() + off * per_tok, S.data(), nullptr);
    gated_linear_transfer(ts, n, log_a.data() + off * per_tok, Tm.data());
  };
  std::vector<float> T1, S1, T2, S2, out(state_numel(ts));
  seg(0, n1, T1, S1);
  seg(n1, n2, T2, S2);
  transfer_apply(ts, T1.data(), S0.data(), S1.data(), out.data());
  transfer_apply(ts, T2.data(), out.data(), S2.data(), out.data());
  EXPECT_LT(rel_err(out, ref), 1e-5f);

  std::vector<float> T12(transfer_numel(ts));
  transfer_compose(ts, T2.data(), T1.data(), T12.data());
  std::vector<float> S12(state_numel(ts));
  transfer_apply(ts, T2.data(), S1.data(), S2.data(), S12.data());
  transfer_apply(ts, T12.data(), S0.data(), S12.data(), out.data());
  EXPECT_LT(rel_err(out, ref), 1e-5f);
}

INSTANTIATE_TEST_SUITE_P(Shapes, GatedScan, ::testing::Values(TransferKind::Scalar, TransferKind::Diagonal));

// A linear layer whose q/k carry RoPE (Ring): the state of a segment built at start a, rotated by
// (b - a), equals the state built at start b (reference §6.3). Scalar decay commutes with rotations.
TEST(RopeState, ReRotationMatchesRecomputationAtNewOffset) {
  const TransferShape ts{TransferKind::Scalar, 2, 16, 8};
  const int64_t T = 19, rot = 8, a = 0, b = 1234;
  const double theta = 1e6;
  const auto k0 = test::randn(T * ts.H * ts.dk, 7), v = test::randn(T * ts.H * ts.dv, 8);
  const auto log_a = test::uniform(T * ts.H, 9, -0.2f, -0.01f);
  auto state_at = [&](int64_t start) {
    std::vector<float> k = k0;
    std::vector<int64_t> pos(T);
    std::iota(pos.begin(), pos.end(), start);
    rope_apply(k.data(), T, ts.H, ts.dk, rot, pos.data(), theta);
    std::vector<float> S(state_numel(ts), 0.0f);
    gated_linear_scan(ts, T, k.data(), k.data(), v.data(), log_a.data(), S.data(), nullptr);
    return S;
  };
  std::vector<float> Sa = state_at(a);
  const std::vector<float> Sb = state_at(b);
  EXPECT_GT(rel_err(Sa, Sb), 1e-3f);  // position matters
  rope_shift_state(Sa.data(), ts.H, ts.dk, ts.dv, rot, b - a, theta);
  EXPECT_LT(rel_err(Sa, Sb), 2e-5f);
}

TEST(RopeKeys, ShiftMatchesRotationAtNewPosition) {
  const int64_t rows = 5, H = 2, hd = 32, rot = 8;
  const auto x = test::randn(rows * H * hd, 3);
  std::vector<int64_t> p0 = {0, 1, 2, 3, 4}, p1 = {700, 701, 702, 703, 704};
  std::vector<float> a = x, b = x;
  rope_apply(a.data(), rows, H, hd, rot, p0.data(), 1e7);
  rope_apply(b.data(), rows, H, hd, rot, p1.data(), 1e7);
  rope_shift(a.data(), rows, H, hd, rot, 700, 1e7);
  EXPECT_LT(rel_err(a, b), 2e-5f);
}

}  // namespace
}  // namespace hypic::cpu
