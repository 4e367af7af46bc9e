// The cold scatter (runtime/cold_scatter.h) on the fixture models, on the CPU and (where present) on one
// CUDA device over worker streams: a cold prompt whose missing blocks were prefilled on several workers
// and then run gives the logits, the logits of a forced continuation and the greedy continuation of the same
// prompt run cold in one pass, every block a hit, only seams and the query computed; under LPT and round robin,
// with the engine's own backend among the workers, a repeated block once, nothing left to do the second time;
// bad setups and prompts are refused without storing anything.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>

#include "runtime/backends.h"
#include "runtime/cold_scatter.h"
#include "runtime/engine.h"
#include "runtime/error.h"
#include "tests/runtime/bf16_agreement.h"
#include "tests/runtime/token_blocks.h"

namespace hypic {
namespace {

using testing_util::block;

const std::string kModels = std::string(HYPIC_SOURCE_DIR) + "/tests/fixtures/models/";
using Param = std::tuple<std::string, std::string>;  // fixture, device

class ColdScatterTest : public ::testing::TestWithParam<Param> {
 protected:
  void SetUp() override {
    const std::string& device = std::get<1>(GetParam());
    if (device == "cuda" && !(cuda_built() && cuda_device_present())) GTEST_SKIP() << "no CUDA backend or device";
    dir_ = kModels + std::get<0>(GetParam());
    dev_ = open_backend(dir_, device == "cuda" ? Device::Cuda : Device::Cpu);
    for (int i = 0; i < 3; ++i) {
      owned_.push_back(dev_->worker());
      ASSERT_NE(owned_.back(), nullptr) << "the backend has no workers";
    }
    bounds_ = testing_bf16::load_bounds(dir_);
    // Uneven blocks (one long), the query last.
    for (auto [n, seed] : {std::pair{31, 1}, {90, 2}, {7, 3}, {23, 4}, {12, 5}, {44, 6}, {6, 7}})
      blocks_.push_back({block(n, seed), BlockCache::Cache});
  }
  std::string what(const std::string& s) const {
    return std::get<0>(GetParam()) + "/" + std::get<1>(GetParam()) + " " + s;
  }
  void expect_same(const std::vector<float>& a, const std::vector<float>& ref, const std::string& s) const {
    ASSERT_EQ(a.size(), ref.size());
    const int64_t V = dev_->config().vocab_size;
    if (dev_->device() == Device::Cpu) {
      float m = 0;
      for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(a[i] - ref[i]));
      EXPECT_LE(m, 1e-4f) << what(s);
    } else {
      const auto t = bounds_.two;
      testing_bf16::expect_close(testing_bf16::compare(a.data(), ref.data(), static_cast<int64_t>(a.size()) / V, V,
                                                       bounds_.range),
                                 {t.max_rel, t.mean_rel, 0.0}, what(s));
    }
  }
  std::vector<Backend*> workers(bool with_main) {
    std::vector<Backend*> w;
    if (with_main) w.push_back(dev_.get());
    for (auto& o : owned_) w.push_back(o.get());
    return w;
  }
  int64_t seams_and_query() const {
    int64_t n = 0;
    for (size_t i = 0; i + 1 < blocks_.size(); ++i)
      n += i == 0 ? 0 : std::min<int64_t>(8, static_cast<int64_t>(blocks_[i].tokens.size()));
    return n + static_cast<int64_t>(blocks_.back().tokens.size());
  }

  std::string dir_;
  std::unique_ptr<Backend> dev_;
  std::vector<std::unique_ptr<Backend>> owned_;
  testing_bf16::Bounds bounds_;
  std::vector<PromptBlock> blocks_;
};

TEST_P(ColdScatterTest, ScatteredPrefillsGiveTheOnePassResult) {
  Engine one(*dev_, CacheMode::Hypic, {});
  PromptResult ref = one.run(blocks_);
  std::unique_ptr<State> ref_state = dev_->clone(*ref.state);
  const std::vector<int> ref_next = one.greedy_decode(ref, 6);
  // Every row of a continuation forced along the one-pass greedy tokens, not only the first token's: a state
  // that composes wrong in a few heads can leave the first row within bounds and show in the later ones.
  const std::vector<int> forced(ref_next.begin(), ref_next.end() - 1);
  const std::vector<float> ref_rows = one.forward(forced, *ref_state, /*all_logits=*/true);
  ASSERT_EQ(ref_rows.size(), forced.size() * static_cast<size_t>(dev_->config().vocab_size));
  int64_t total = 0;
  for (size_t i = 0; i + 1 < blocks_.size(); ++i) total += static_cast<int64_t>(blocks_[i].tokens.size());

  for (Placement how : {Placement::Lpt, Placement::RoundRobin}) {
    for (bool with_main : {false, true}) {
      const std::string s = std::string(placement_name(how)) + (with_main ? " with the engine's backend" : "");
      Engine eng(*dev_, CacheMode::Hypic, {});
      ColdScatter scatter(eng, workers(with_main), how);
      const ScatterReport rep = scatter.prefill_missing(blocks_);
      EXPECT_EQ(rep.missing_blocks, static_cast<int64_t>(blocks_.size()) - 1) << what(s);
      EXPECT_EQ(rep.missing_tokens, total) << what(s);
      EXPECT_EQ(std::accumulate(rep.worker_tokens.begin(), rep.worker_tokens.end(), int64_t{0}), total) << what(s);
      int busy = 0;
      for (int64_t t : rep.worker_tokens) busy += t > 0;
      EXPECT_EQ(busy, scatter.workers()) << what(s) << ": six blocks over at most four workers use all of them";
      EXPECT_GT(rep.makespan_cost, 0);

      PromptResult r = eng.run(blocks_);
      for (const BlockOutcome& o : r.blocks) EXPECT_TRUE(o.hit) << what(s);
      EXPECT_EQ(r.computed_tokens, seams_and_query()) << what(s);
      expect_same(r.logits, ref.logits, s + " first-token logits");
      std::unique_ptr<State> forced_state = dev_->clone(*r.state);
      expect_same(eng.forward(forced, *forced_state, /*all_logits=*/true), ref_rows, s + " forced continuation");
      if (dev_->device() == Device::Cpu) {
        EXPECT_EQ(eng.greedy_decode(r, 6), ref_next) << what(s);
      }

      const ScatterReport again = scatter.prefill_missing(blocks_);
      EXPECT_EQ(again.missing_blocks, 0) << what(s);
    }
  }
}

TEST_P(ColdScatterTest, RepeatedAndUncachedBlocks) {
  std::vector<PromptBlock> blocks = blocks_;
  blocks.insert(blocks.end() - 1, blocks_[2]);  // the 7-token block again
  blocks[3].cache = BlockCache::None;           // always computed by run(), never stored
  Engine eng(*dev_, CacheMode::Hypic, {});
  ColdScatter scatter(eng, workers(false));
  const ScatterReport rep = scatter.prefill_missing(blocks);
  EXPECT_EQ(rep.missing_blocks, static_cast<int64_t>(blocks.size()) - 1 - 2) << what("repeat once, none skipped");
  PromptResult r = eng.run(blocks);
  for (size_t i = 0; i < r.blocks.size(); ++i) EXPECT_EQ(r.blocks[i].hit, i != 3) << what("block ") << i;
  Engine one(*dev_, CacheMode::Hypic, {});
  expect_same(r.logits, one.run(blocks).logits, "repeated block");
}

TEST_P(ColdScatterTest, NamespacesAndModes) {
  Engine eng(*dev_, CacheMode::NoSeam, {});
  ColdScatter scatter(eng, workers(false));
  EXPECT_EQ(scatter.prefill_missing(blocks_, "tenant-a").missing_blocks, 6);
  EXPECT_EQ(scatter.prefill_missing(blocks_, "tenant-b").missing_blocks, 6) << what("another namespace misses");
  PromptResult r = eng.run(blocks_, nullptr, "tenant-a");
  for (const BlockOutcome& o : r.blocks) EXPECT_TRUE(o.hit);
  EXPECT_EQ(r.computed_tokens, static_cast<int64_t>(blocks_.back().tokens.size())) << what("noseam: the query alone");
}

TEST_P(ColdScatterTest, RefusesBadSetupsAndPrompts) {
  Engine full(*dev_, CacheMode::Full, {});
  EXPECT_THROW(ColdScatter(full, workers(false)), InvalidArgument);
  Engine eng(*dev_, CacheMode::Hypic, {});
  EXPECT_THROW(ColdScatter(eng, {}), InvalidArgument);
  const std::string other = std::get<0>(GetParam()) == "qwen3_5_dense" ? "qwen3_5_moe" : "qwen3_5_dense";
  auto stranger = open_backend(kModels + other, dev_->device());
  EXPECT_THROW(ColdScatter(eng, {stranger.get()}), InvalidArgument) << what("other weights");

  ColdScatter scatter(eng, workers(false));
  std::vector<PromptBlock> bad = blocks_;
  bad[2].tokens[3] = static_cast<int>(dev_->config().vocab_size);
  EXPECT_THROW(scatter.prefill_missing(bad), InvalidArgument);
  std::vector<PromptBlock> no_query = blocks_;
  no_query.back().tokens.clear();
  EXPECT_THROW(scatter.prefill_missing(no_query), InvalidArgument);
  EXPECT_EQ(eng.store().stats().entries, 0u) << what("nothing stored by a refused prompt");
}

INSTANTIATE_TEST_SUITE_P(Families, ColdScatterTest,
                         ::testing::Combine(::testing::Values("qwen3_next_moe", "qwen3_5_dense", "qwen3_5_moe",
                                                              "bailing_moe_linear", "minimax", "kimi_linear",
                                                              "bailing_hybrid"),
                                            ::testing::Values("cpu", "cuda")),
                         [](const auto& info) { return std::get<0>(info.param) + "_" + std::get<1>(info.param); });

}  // namespace
}  // namespace hypic
