// The lightning transfer operator of Ring (bailing_moe_linear) and MiniMax on the CPU backend, at layer 0
// of the fixture models where a layer's inputs depend only on the tokens and their positions, so every law
// is exact: T_C = lambda^n per head, S(C1 C2 | S0) = T2 (T1 S0 + S1) + S2 with T_{C1C2} = T2 T1, and (Ring,
// RoPE inside the layer) a body computed at local positions and re-rotated by the offset equals the body
// recomputed at that offset; (MiniMax, no RoPE) the body does not depend on the offset.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "runtime/cpu_backend.h"
#include "runtime/sequence_state.h"

namespace hypic {
namespace {

const std::string kModels = std::string(HYPIC_SOURCE_DIR) + "/tests/fixtures/models/";

float rel_err(const std::vector<float>& a, const std::vector<float>& b) {
  float num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num = std::max(num, std::fabs(a[i] - b[i]));
    den = std::max(den, std::fabs(b[i]));
  }
  return num / den;
}

class LightningTransfer : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    b_ = CpuBackend::load(kModels + GetParam());
    const ModelConfig& c = b_->config();
    ASSERT_EQ(c.linear_kind, LinearKind::Lightning);
    ASSERT_EQ(c.layer_kinds[0], LayerKind::LinearAttention);
    state_n_ = c.lin_v_heads * c.lin_k_dim * c.lin_v_dim;
    op_n_ = c.lin_transfer_numel();
  }
  // Layer 0's projections of `ids` at positions pos0, pos0 + 1, ...
  std::unique_ptr<Rows> project(const std::vector<int>& ids, int64_t pos0) {
    auto r = b_->rows(static_cast<int64_t>(ids.size()));
    std::vector<int64_t> pos(ids.size());
    std::iota(pos.begin(), pos.end(), pos0);
    b_->embed(ids, pos, *r);
    b_->input_norm(0, *r);
    b_->linear_project(0, *r);
    return r;
  }
  // (T, S(rows | 0)) of rows [row0, row0 + n) of `r`.
  std::pair<std::vector<float>, std::vector<float>> body(Rows& r, int64_t row0, int64_t n) {
    std::vector<float> T(op_n_), S(state_n_);
    auto st = b_->new_state();
    b_->linear_body(0, r, row0, n, *st, T.data(), S.data());
    return {T, S};
  }
  std::vector<float> state_of(const State& st) { return cpu_state(st).layers[0].lin.S; }

  std::unique_ptr<CpuBackend> b_;
  int64_t state_n_ = 0, op_n_ = 0;
  const std::vector<int> ids_ = {35, 270, 18, 99, 402, 7, 64, 64, 311, 150, 23, 88, 190, 5, 260, 41, 77, 303, 12};
};

TEST_P(LightningTransfer, OperatorIsTheDecayToTheLength) {
  auto r = project(ids_, 0);
  const auto [T, S] = body(*r, 0, 19);
  const std::vector<float> log_decay = b_->config().lightning_log_decay(0);
  for (int64_t h = 0; h < op_n_; ++h) EXPECT_NEAR(T[h], std::exp(19.0 * log_decay[h]), 1e-6) << "head " << h;
}

TEST_P(LightningTransfer, CompositionLaw) {
  auto r = project(ids_, 0);
  const int64_t n1 = 8, n2 = 11;
  const auto [T1, S1] = body(*r, 0, n1);
  const auto [T2, S2] = body(*r, n1, n2);
  const auto [T12, S12] = body(*r, 0, n1 + n2);
  for (int64_t h = 0; h < op_n_; ++h) EXPECT_NEAR(T12[h], T2[h] * T1[h], 1e-6) << "head " << h;
  // From a non-zero start state: the recurrence run straight through against the composed pieces.
  std::vector<float> S0(state_n_);
  for (int64_t i = 0; i < state_n_; ++i) S0[i] = std::sin(0.37f * static_cast<float>(i));
  auto direct = b_->new_state();
  b_->load_linear(0, *direct, S0.data(), nullptr);
  b_->linear_recur(0, *r, 0, n1 + n2, *direct, nullptr);
  auto composed = b_->new_state();
  b_->load_linear(0, *composed, S0.data(), nullptr);
  b_->compose_linear(0, *composed, T1.data(), S1.data(), Composition::Transfer, 0);
  b_->compose_linear(0, *composed, T2.data(), S2.data(), Composition::Transfer, 0);
  EXPECT_LE(rel_err(state_of(*composed), state_of(*direct)), 1e-5f);
  auto whole = b_->new_state();
  b_->load_linear(0, *whole, S0.data(), nullptr);
  b_->compose_linear(0, *whole, T12.data(), S12.data(), Composition::Transfer, 0);
  EXPECT_LE(rel_err(state_of(*whole), state_of(*direct)), 1e-5f);
  // The naive sum drops T: visibly not the state.
  auto naive = b_->new_state();
  b_->load_linear(0, *naive, S0.data(), nullptr);
  b_->compose_linear(0, *naive, T12.data(), S12.data(), Composition::NaiveSum, 0);
  EXPECT_GT(rel_err(state_of(*naive), state_of(*direct)), 1e-2f);
}

TEST_P(LightningTransfer, ReRotationEqualsRecomputationAtTheNewOffset) {
  for (int64_t offset : {1, 57, 1000}) {
    auto local = project(ids_, 0);
    auto moved = project(ids_, offset);
    const auto [Tl, Sl] = body(*local, 0, 19);
    const auto [Tm, Sm] = body(*moved, 0, 19);
    EXPECT_EQ(Tl, Tm) << "the decay does not depend on position";
    if (!b_->config().linear_rope) {  // MiniMax: nothing in the layer depends on position
      EXPECT_EQ(Sl, Sm) << "offset " << offset;
      std::vector<float> shifted = Sl;
      b_->shift_linear_state(shifted.data(), offset);
      EXPECT_EQ(shifted, Sl);
      continue;
    }
    ASSERT_GT(rel_err(Sl, Sm), 1e-2f) << "offset " << offset << ": the state must carry the rotation";
    std::vector<float> shifted = Sl;
    b_->shift_linear_state(shifted.data(), offset);
    EXPECT_LE(rel_err(shifted, Sm), 1e-5f) << "offset " << offset;
    // Composition with the offset applies the same rotation to the cached body.
    auto st = b_->new_state();
    b_->compose_linear(0, *st, Tl.data(), Sl.data(), Composition::Transfer, offset);
    EXPECT_LE(rel_err(state_of(*st), Sm), 1e-5f) << "offset " << offset;
    // Back: a body built at the offset, shifted by -offset, is the local body.
    std::vector<float> back = Sm;
    b_->shift_linear_state(back.data(), -offset);
    EXPECT_LE(rel_err(back, Sl), 1e-5f) << "offset " << offset;
  }
}

INSTANTIATE_TEST_SUITE_P(Families, LightningTransfer, ::testing::Values("bailing_moe_linear", "minimax"));

}  // namespace
}  // namespace hypic
