// A Runtime with a cache directory on the CPU, on a fixture model: after a restart (the first
// Runtime closed, a new one opened on the same directory) requests hit what the first one cached — the
// same block hits, computed tokens and logits as a warm run inside the first process. The same with bf16
// records: the same hits, and the first token unchanged.
#include <gtest/gtest.h>

#include <algorithm>

#include "sdk/runtime.h"
#include "tests/sdk/temp_dir.h"
#include "tests/runtime/token_blocks.h"

namespace hypic::sdk {
namespace {

const std::string kModel = std::string(HYPIC_SOURCE_DIR) + "/tests/fixtures/models/qwen3_5_dense";

using testing_util::block;

// Two prompts sharing a system block and two documents in either order.
std::vector<std::vector<std::vector<int>>> prompts() {
  const auto sys = block(24, 1), d1 = block(40, 2), d2 = block(36, 3);
  return {{sys, d1, d2, block(6, 4)}, {sys, d2, d1, block(5, 5)}};
}

int hits(const PromptResult& r) {
  int h = 0;
  for (auto& b : r.blocks) h += b.hit;
  return h;
}

void restart_hits_like_a_warm_run(const std::string& format) {
  test::TempDir t;
  RuntimeOptions o;
  o.model_dir = kModel;
  o.device = "cpu";
  o.cache_dir = t.file("cache");
  o.cache_format = parse_cache_format(format);
  const auto ps = prompts();
  std::vector<PromptResult> warm;
  {
    auto rt = Runtime::open(o);
    for (auto& p : ps) rt->engine().run(p);                           // cold
    for (auto& p : ps) warm.push_back(rt->engine().run(p));           // warm, in-process
    EXPECT_GT(rt->cache_dir()->stats().entries, 0);
  }
  auto rt = Runtime::open(o);  // the restart
  for (size_t i = 0; i < ps.size(); ++i) {
    const PromptResult r = rt->engine().run(ps[i]);
    EXPECT_EQ(hits(r), hits(warm[i])) << "prompt " << i;
    EXPECT_EQ(hits(r), int(r.blocks.size())) << "prompt " << i;
    EXPECT_EQ(r.computed_tokens, warm[i].computed_tokens) << "prompt " << i;
    const auto top = [](const std::vector<float>& l) { return std::max_element(l.begin(), l.end()) - l.begin(); };
    if (format == "fp32") EXPECT_EQ(r.logits, warm[i].logits) << "prompt " << i;
    else EXPECT_EQ(top(r.logits), top(warm[i].logits)) << "prompt " << i;
  }
  EXPECT_GT(rt->engine().tiers()->stats().disk_hits, 0);
  EXPECT_EQ(rt->engine().tiers()->stats().dropped, 0);
}

TEST(RuntimeCacheDir, RestartHitsLikeAWarmRun) { restart_hits_like_a_warm_run("fp32"); }
TEST(RuntimeCacheDir, RestartWithBf16RecordsHitsLikeAWarmRun) { restart_hits_like_a_warm_run("bf16"); }
TEST(RuntimeCacheDir, RestartWithCompactRecordsHitsLikeAWarmRun) { restart_hits_like_a_warm_run("compact"); }

TEST(RuntimeCacheDir, AnotherSeamWidthDoesNotHitTheOldEntries) {
  test::TempDir t;
  RuntimeOptions o;
  o.model_dir = kModel;
  o.device = "cpu";
  o.cache_dir = t.file("cache");
  const auto ps = prompts();
  { Runtime::open(o)->engine().run(ps[0]); }
  o.seam_width = 4;  // a key context of its own: nothing cached before applies
  auto rt = Runtime::open(o);
  EXPECT_EQ(hits(rt->engine().run(ps[0])), 0);
}

}  // namespace
}  // namespace hypic::sdk
