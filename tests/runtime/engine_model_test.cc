// The caching engine on the fixture models: exactness of the stitch where it must be exact, the
// accounting of computed tokens, and the damage of the naive ablation.
#include "runtime/engine.h"

#include <gtest/gtest.h>

#include <cmath>

#include "runtime/segment_prefill.h"
#include "runtime/stitch.h"

namespace hypic {
namespace {

const std::string kModels = std::string(HYPIC_SOURCE_DIR) + "/tests/fixtures/models/";

float rel_err(const std::vector<float>& a, const std::vector<float>& b) {
  float num = 0, den = 1e-30f;
  for (size_t i = 0; i < a.size(); ++i) {
    num = std::max(num, std::fabs(a[i] - b[i]));
    den = std::max(den, std::fabs(b[i]));
  }
  return num / den;
}

float max_abs(const std::vector<float>& a, const std::vector<float>& b) {
  float m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(a[i] - b[i]));
  return m;
}

// Deterministic pseudo-text: ids in the BPE range of the fixture tokenizer (no special tokens).
std::vector<int> block(int n, int seed) {
  std::vector<int> v;
  uint32_t x = 2654435761u * (seed + 1);
  for (int i = 0; i < n; ++i) {
    x = x * 1664525u + 1013904223u;
    v.push_back(static_cast<int>((x >> 8) % 400) + 20);
  }
  return v;
}

class EngineTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    model_ = HybridModel::load(kModels + GetParam());
    blocks_ = {block(23, 1), block(17, 2), block(30, 3), block(12, 4), block(6, 5)};  // last: query
  }
  std::vector<int> concat() const {
    std::vector<int> all;
    for (auto& b : blocks_) all.insert(all.end(), b.begin(), b.end());
    return all;
  }
  std::vector<float> full_logits(SequenceState* out_state = nullptr) const {
    SequenceState st = model_->new_state();
    auto l = model_->forward(concat(), st);
    if (out_state) *out_state = std::move(st);
    return l;
  }
  // Entries built under each block's true prefix (the chain case).
  std::pair<SequenceState, std::vector<std::shared_ptr<const SegmentEntry>>> chain_entries(int64_t seam) const {
    auto first = prefill_segment(*model_, blocks_[0], seam);
    SequenceState ctx = model_->new_state();
    model_->forward(blocks_[0], ctx);
    std::vector<std::shared_ptr<const SegmentEntry>> segs;
    for (size_t i = 1; i + 1 < blocks_.size(); ++i) {
      segs.push_back(std::make_shared<SegmentEntry>(prefill_segment(*model_, blocks_[i], seam, &ctx)));
      model_->forward(blocks_[i], ctx);
    }
    return {state_from_first_segment(*model_, first), segs};
  }
  std::unique_ptr<HybridModel> model_;
  std::vector<std::vector<int>> blocks_;
};

TEST_P(EngineTest, LayerZeroOfStitchEqualsFullRecompute) {
  SequenceState full;
  full_logits(&full);
  Engine hypic(*model_, CacheMode::Hypic, {});
  hypic.run(blocks_);              // builds the entries in isolation
  PromptResult r = hypic.run(blocks_);  // all hits
  ASSERT_EQ(model_->config().layer_kinds[0], LayerKind::LinearAttention);
  EXPECT_LE(rel_err(r.state.layers[0].lin.S, full.layers[0].lin.S), 1e-5f);
  EXPECT_LE(rel_err(r.state.layers[0].lin.conv_tail, full.layers[0].lin.conv_tail), 1e-5f);
  // Above layer 0 a cached segment is an approximation: the test would be vacuous if it were exact.
  EXPECT_GT(rel_err(r.state.layers[1].lin.S, full.layers[1].lin.S), 1e-4f);
}

TEST_P(EngineTest, ChainCaseEqualsFullRecompute) {
  const auto ref = full_logits();
  for (int64_t seam : {0, 3, 8}) {
    auto [base, segs] = chain_entries(seam);
    StitchResult s = stitch(*model_, base, segs, blocks_.back());
    EXPECT_LE(max_abs(s.logits, ref), 1e-4f) << "seam " << seam;
  }
}

TEST_P(EngineTest, SeamCoveringEverySegmentEqualsFullRecompute) {
  EngineOptions opt;
  opt.seam_width = 64;  // longer than every block
  Engine e(*model_, CacheMode::Hypic, opt);
  e.run(blocks_);
  PromptResult r = e.run(blocks_);
  EXPECT_LE(max_abs(r.logits, full_logits()), 1e-4f);
}

TEST_P(EngineTest, DecodeAfterExactStitchMatchesDecodeAfterFullPrefill) {
  auto [base, segs] = chain_entries(8);
  StitchResult s = stitch(*model_, base, segs, blocks_.back());
  Engine full(*model_, CacheMode::Full, {});
  PromptResult f = full.run(blocks_);
  PromptResult p{s.logits, std::move(s.state)};
  EXPECT_EQ(full.greedy_decode(p, 10), full.greedy_decode(f, 10));
}

TEST_P(EngineTest, ComputedTokensOnAllHitPrompt) {
  EngineOptions opt;
  opt.seam_width = 8;
  Engine e(*model_, CacheMode::Hypic, opt);
  PromptResult cold = e.run(blocks_);
  int64_t body = 0;
  for (size_t i = 0; i + 1 < blocks_.size(); ++i) body += blocks_[i].size();
  const int64_t k = static_cast<int64_t>(blocks_.size()) - 1, q = blocks_.back().size();
  EXPECT_EQ(cold.computed_tokens, body + (k - 1) * 8 + q);  // isolated prefills + stitch
  PromptResult warm = e.run(blocks_);
  EXPECT_EQ(warm.computed_tokens, (k - 1) * 8 + q);
  for (auto& b : warm.blocks) EXPECT_TRUE(b.hit);
  // Reordered blocks still hit: position independence.
  std::swap(blocks_[1], blocks_[2]);
  PromptResult re = e.run(blocks_);
  EXPECT_EQ(re.computed_tokens, (k - 1) * 8 + q);
}

TEST_P(EngineTest, NaiveSumIsWorseThanTransfer) {
  const auto ref = full_logits();
  auto [base, segs] = chain_entries(8);
  const float exact = max_abs(stitch(*model_, base, segs, blocks_.back(), Composition::Transfer).logits, ref);
  const float naive = max_abs(stitch(*model_, base, segs, blocks_.back(), Composition::NaiveSum).logits, ref);
  EXPECT_LE(exact, 1e-4f);
  EXPECT_GT(naive, 1e-2f);
}

TEST_P(EngineTest, PrefixModeReusesExactChain) {
  Engine e(*model_, CacheMode::Prefix, {});
  PromptResult first = e.run(blocks_);
  EXPECT_EQ(first.computed_tokens, static_cast<int64_t>(concat().size()));
  PromptResult again = e.run(blocks_);
  EXPECT_EQ(again.computed_tokens, static_cast<int64_t>(blocks_.back().size()));
  EXPECT_LE(max_abs(again.logits, full_logits()), 1e-4f);
  // A changed middle block breaks the chain from there on.
  blocks_[2] = block(30, 99);
  PromptResult changed = e.run(blocks_);
  EXPECT_EQ(changed.computed_tokens, static_cast<int64_t>(blocks_[2].size() + blocks_[3].size() + blocks_[4].size()));
  EXPECT_LE(max_abs(changed.logits, full_logits()), 1e-4f);
}

INSTANTIATE_TEST_SUITE_P(Families, EngineTest, ::testing::Values("qwen3_next_moe", "qwen3_5_dense", "qwen3_5_moe"));

}  // namespace
}  // namespace hypic

namespace hypic {
namespace {

TEST_P(EngineTest, UncachedBlockIsRecomputedAndNeverStored) {
  std::vector<PromptBlock> pb;
  for (auto& b : blocks_) pb.push_back({b, BlockCache::Cache});
  pb[2].cache = BlockCache::None;  // e.g. a timestamp or per-user block in the middle
  Engine e(*model_, CacheMode::Hypic, {});
  e.run(pb);
  PromptResult warm = e.run(pb);
  const int64_t k = static_cast<int64_t>(blocks_.size()) - 1, q = blocks_.back().size();
  EXPECT_EQ(warm.computed_tokens, (k - 2) * 8 + static_cast<int64_t>(blocks_[2].size()) + q);
  EXPECT_FALSE(warm.blocks[2].hit);
  EXPECT_TRUE(warm.blocks[1].hit && warm.blocks[3].hit);
  EXPECT_EQ(e.store().stats().entries, static_cast<size_t>(k - 1));
  // An uncached first block: everything after it is stitched onto a computed prefix.
  pb[2].cache = BlockCache::Cache;
  pb[0].cache = BlockCache::None;
  PromptResult r = e.run(pb);
  EXPECT_EQ(r.state.length, static_cast<int64_t>(concat().size()));
}

}  // namespace
}  // namespace hypic
