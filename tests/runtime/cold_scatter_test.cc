// The cold scatter's placement (runtime/cold_scatter.h): LPT and round robin on known and random job
// sets, the list-scheduling bound, and the cost model's shape.
#include <gtest/gtest.h>

#include <numeric>
#include <random>

#include "runtime/cold_scatter.h"
#include "runtime/error.h"
#include "runtime/model_config.h"

namespace hypic {
namespace {

TEST(PlaceBlocks, LptOnAKnownSet) {
  const std::vector<int64_t> cost = {5, 5, 4, 4, 3, 3, 3};
  const BlockPlacement lpt = place_blocks(cost, 3, Placement::Lpt);
  // 5 -> w0, 5 -> w1, 4 -> w2, 4 -> w2, then the 3s to the least loaded: w0, w1, then w0 (ties: lower).
  EXPECT_EQ(lpt.worker, (std::vector<int>{0, 1, 2, 2, 0, 1, 0}));
  EXPECT_EQ(lpt.load, (std::vector<int64_t>{11, 8, 8}));
  EXPECT_EQ(lpt.makespan(), 11);
  const BlockPlacement rr = place_blocks(cost, 3, Placement::RoundRobin);
  EXPECT_EQ(rr.worker, (std::vector<int>{0, 1, 2, 0, 1, 2, 0}));
  EXPECT_EQ(rr.load, (std::vector<int64_t>{12, 8, 7}));
}

TEST(PlaceBlocks, UnevenSplitLptBeatsRoundRobin) {
  // One long block among short ones, in prompt order: round robin puts more after it on its worker.
  const std::vector<int64_t> cost = {8000, 500, 500, 500, 4000, 500, 500, 500};
  const BlockPlacement lpt = place_blocks(cost, 2, Placement::Lpt);
  const BlockPlacement rr = place_blocks(cost, 2, Placement::RoundRobin);
  EXPECT_EQ(lpt.makespan(), 8000);
  EXPECT_EQ(rr.makespan(), 8000 + 500 + 4000 + 500);
}

TEST(PlaceBlocks, RandomSetsKeepTheBounds) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 300; ++trial) {
    const int W = 1 + static_cast<int>(rng() % 8);
    std::vector<int64_t> cost(rng() % 40);
    for (auto& c : cost) c = static_cast<int64_t>(rng() % 10000);
    const int64_t total = std::accumulate(cost.begin(), cost.end(), int64_t{0});
    const int64_t longest = cost.empty() ? 0 : *std::max_element(cost.begin(), cost.end());
    for (Placement how : {Placement::Lpt, Placement::RoundRobin}) {
      const BlockPlacement p = place_blocks(cost, W, how);
      ASSERT_EQ(p.worker.size(), cost.size());
      ASSERT_EQ(p.load.size(), static_cast<size_t>(W));
      std::vector<int64_t> load(static_cast<size_t>(W), 0);
      for (size_t i = 0; i < cost.size(); ++i) {
        ASSERT_GE(p.worker[i], 0);
        ASSERT_LT(p.worker[i], W);
        load[static_cast<size_t>(p.worker[i])] += cost[i];
      }
      EXPECT_EQ(load, p.load);
      EXPECT_GE(p.makespan(), std::max(longest, (total + W - 1) / W));
      // Greedy list scheduling never exceeds the mean load plus the longest job.
      if (how == Placement::Lpt) {
        EXPECT_LE(p.makespan(), total / W + longest);
      }
    }
  }
}

TEST(PlaceBlocks, RefusesBadInput) {
  const std::vector<int64_t> ok = {1, 2};
  EXPECT_THROW(place_blocks(ok, 0, Placement::Lpt), InvalidArgument);
  const std::vector<int64_t> negative = {1, -2};
  EXPECT_THROW(place_blocks(negative, 2, Placement::Lpt), InvalidArgument);
  EXPECT_EQ(place_blocks({}, 3, Placement::Lpt).makespan(), 0);
}

TEST(PlaceBlocks, PlacementNames) {
  EXPECT_EQ(parse_placement("lpt"), Placement::Lpt);
  EXPECT_EQ(parse_placement("round-robin"), Placement::RoundRobin);
  EXPECT_EQ(parse_placement("rr"), Placement::RoundRobin);
  EXPECT_STREQ(placement_name(Placement::RoundRobin), "round-robin");
  EXPECT_THROW(parse_placement("fastest"), InvalidArgument);
}

TEST(PrefillCost, GrowsFasterThanLinearWithAttention) {
  const ModelConfig cfg = ModelConfig::load(std::string(HYPIC_SOURCE_DIR) + "/tests/fixtures/models/qwen3_5_moe/config.json");
  const int64_t a = prefill_cost(cfg, 1000), b = prefill_cost(cfg, 2000), c = prefill_cost(cfg, 32768);
  EXPECT_GT(a, 0);
  EXPECT_GT(b, 2 * a);  // the causal attention's pairs
  EXPECT_LT(b, 4 * a);  // the projections and experts dominate at this length
  EXPECT_GT(c, b);
}

}  // namespace
}  // namespace hypic
