// The KDA transfer operator of Kimi-Linear and Ring-2.5 on the CPU backend, at layer 0 of the fixture models, where a
// layer's inputs depend only on the tokens, so every law is exact: S(C1 C2 | S0) = T2 (T1 S0 + S1) + S2 and
// T_{C1C2} = T2 T1 once C2's (T, S) are read with C1's conv tail (the conv warm-up; without it they are
// wrong), T is dense and not symmetric, and nothing in the layer depends on position (no RoPE).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "kernels/transfer_operator.h"
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

class KdaTransfer : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    b_ = CpuBackend::load(kModels + GetParam());
    const ModelConfig& c = b_->config();
    ASSERT_EQ(c.linear_kind, LinearKind::Kda);
    ASSERT_EQ(c.layer_kinds[0], LayerKind::LinearAttention);
    state_n_ = c.lin_v_heads * c.lin_k_dim * c.lin_v_dim;
    op_n_ = c.lin_transfer_numel();
    tail_n_ = (c.conv_kernel - 1) * c.lin_conv_dim();
  }
  std::unique_ptr<Rows> project(const std::vector<int>& ids, int64_t pos0) {
    auto r = b_->rows(static_cast<int64_t>(ids.size()));
    std::vector<int64_t> pos(ids.size());
    std::iota(pos.begin(), pos.end(), pos0);
    b_->embed(ids, pos, *r);
    b_->input_norm(0, *r);
    b_->linear_project(0, *r);
    return r;
  }
  // (T, S(rows | 0)) of rows [row0, row0 + n) of `r`, read with the conv tail `tail` (null: zeros), and the
  // conv tail after them.
  struct Body {
    std::vector<float> T, S, tail;
  };
  Body body(Rows& r, int64_t row0, int64_t n, const float* tail) {
    Body out{std::vector<float>(op_n_), std::vector<float>(state_n_), std::vector<float>(tail_n_)};
    auto st = b_->new_state();
    if (tail) b_->load_linear(0, *st, nullptr, tail);
    b_->linear_body(0, r, row0, n, *st, out.T.data(), out.S.data());
    b_->save_linear(0, *st, nullptr, out.tail.data());
    return out;
  }
  std::vector<float> state_of(const State& st) { return cpu_state(st).layers[0].lin.S; }

  std::unique_ptr<CpuBackend> b_;
  int64_t state_n_ = 0, op_n_ = 0, tail_n_ = 0;
  const std::vector<int> ids_ = {35, 270, 18, 99, 402, 7, 64, 64, 311, 150, 23, 88, 190, 5, 260, 41, 77, 303, 12};
};

TEST_P(KdaTransfer, CompositionLawWithConvWarmUp) {
  auto r = project(ids_, 0);
  const int64_t n1 = 8, n2 = 11;
  const Body b1 = body(*r, 0, n1, nullptr);
  const Body b2 = body(*r, n1, n2, b1.tail.data());        // C2 read with C1's trailing conv inputs
  const Body cold = body(*r, n1, n2, nullptr);             // C2 in isolation (zero conv tail)
  const Body b12 = body(*r, 0, n1 + n2, nullptr);
  const ModelConfig& c = b_->config();
  const cpu::TransferShape ts{cpu::TransferKind::Dense, c.lin_v_heads, c.lin_k_dim, c.lin_v_dim};
  std::vector<float> T21(op_n_);
  cpu::transfer_compose(ts, b2.T.data(), b1.T.data(), T21.data());
  EXPECT_LE(rel_err(T21, b12.T), 1e-5f);

  std::vector<float> S0(state_n_);
  for (int64_t i = 0; i < state_n_; ++i) S0[i] = std::sin(0.37f * static_cast<float>(i));
  auto start = [&] {
    auto st = b_->new_state();
    b_->load_linear(0, *st, S0.data(), nullptr);
    return st;
  };
  auto direct = start();
  b_->linear_recur(0, *r, 0, n1 + n2, *direct, nullptr);
  auto composed = start();
  b_->compose_linear(0, *composed, b1.T.data(), b1.S.data(), Composition::Transfer, 0);
  b_->compose_linear(0, *composed, b2.T.data(), b2.S.data(), Composition::Transfer, 0);
  EXPECT_LE(rel_err(state_of(*composed), state_of(*direct)), 1e-5f);
  auto whole = start();
  b_->compose_linear(0, *whole, b12.T.data(), b12.S.data(), Composition::Transfer, 0);
  EXPECT_LE(rel_err(state_of(*whole), state_of(*direct)), 1e-5f);
  // Without the warm-up C2's first K-1 tokens see zeros instead of C1's inputs: not the state.
  auto unwarmed = start();
  b_->compose_linear(0, *unwarmed, b1.T.data(), b1.S.data(), Composition::Transfer, 0);
  b_->compose_linear(0, *unwarmed, cold.T.data(), cold.S.data(), Composition::Transfer, 0);
  EXPECT_GT(rel_err(state_of(*unwarmed), state_of(*direct)), 1e-3f);
  // The naive sum drops T: visibly not the state.
  auto naive = start();
  b_->compose_linear(0, *naive, b12.T.data(), b12.S.data(), Composition::NaiveSum, 0);
  EXPECT_GT(rel_err(state_of(*naive), state_of(*direct)), 1e-2f);
}

TEST_P(KdaTransfer, OperatorIsDenseAndNotSymmetric) {
  auto r = project(ids_, 0);
  const Body b = body(*r, 0, 19, nullptr);
  const int64_t dk = b_->config().lin_k_dim;
  for (int64_t h = 0; h < b_->config().lin_v_heads; ++h) {
    const float* T = b.T.data() + h * dk * dk;
    float asym = 0, off = 0, mx = 0;
    for (int64_t i = 0; i < dk; ++i)
      for (int64_t j = 0; j < dk; ++j) {
        asym = std::max(asym, std::fabs(T[i * dk + j] - T[j * dk + i]));
        if (i != j) off = std::max(off, std::fabs(T[i * dk + j]));
        mx = std::max(mx, std::fabs(T[i * dk + j]));
      }
    EXPECT_GT(off, 1e-3f * mx) << "head " << h << ": not diagonal";
    EXPECT_GT(asym, 1e-3f * mx) << "head " << h << ": not symmetric";
  }
}

TEST_P(KdaTransfer, NothingDependsOnPosition) {
  auto local = project(ids_, 0);
  auto moved = project(ids_, 777);
  const Body a = body(*local, 0, 19, nullptr), b = body(*moved, 0, 19, nullptr);
  EXPECT_EQ(a.T, b.T);
  EXPECT_EQ(a.S, b.S);
  std::vector<float> shifted = a.S;
  b_->shift_linear_state(shifted.data(), 777);
  EXPECT_EQ(shifted, a.S);
}

INSTANTIATE_TEST_SUITE_P(Families, KdaTransfer, ::testing::Values("kimi_linear", "bailing_hybrid"));

}  // namespace
}  // namespace hypic
