// The tiers below the segment store on the CPU backend of a fixture model: a working set four times the
// device budget is served with hits from host memory and disk, with the logits and accounting of an engine
// whose store holds everything; a corrupt record on disk is dropped with a log line and its block
// recomputed. The disk tier here is a map in memory (the real one, over files and SQLite, is
// sdk/cache_dir and has its own tests).
#include "runtime/entry_tiers.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <mutex>

#include "runtime/backends.h"
#include "runtime/engine.h"
#include "tests/runtime/token_blocks.h"

namespace hypic {
namespace {

const std::string kModels = std::string(HYPIC_SOURCE_DIR) + "/tests/fixtures/models/";

using testing_util::block;

// Called from the tiers' writer thread and the engine's: one call at a time.
class MapDisk : public EntryDiskStore {
 public:
  bool contains(const std::string& id) override {
    std::lock_guard<std::mutex> g(mu);
    return records.count(id) > 0;
  }
  void put(const std::string& id, std::string_view record, int64_t) override {
    std::lock_guard<std::mutex> g(mu);
    records[id] = std::string(record);
  }
  std::optional<std::string> get(const std::string& id) override {
    std::lock_guard<std::mutex> g(mu);
    auto it = records.find(id);
    if (it == records.end()) return std::nullopt;
    return it->second;
  }
  void drop(const std::string& id, const std::string&) override {
    std::lock_guard<std::mutex> g(mu);
    records.erase(id);
    ++drops;
  }
  std::mutex mu;
  std::map<std::string, std::string> records;
  int drops = 0;
};

class EntryTiersTest : public ::testing::Test {
 protected:
  void SetUp() override { b_ = open_backend(kModels + "qwen3_5_dense", Device::Cpu); }
  // 16 documents; prompt i is document i, document i+5, a question.
  std::vector<std::vector<std::vector<int>>> prompts() const {
    std::vector<std::vector<std::vector<int>>> p;
    for (int i = 0; i < 16; ++i) p.push_back({block(32, i), block(32, (i + 5) % 16), block(4, 100 + i)});
    return p;
  }
  std::unique_ptr<Backend> b_;
};

TEST_F(EntryTiersTest, WorkingSetFourTimesTheDeviceBudgetIsServedFromHostAndDisk) {
  const size_t entry = Engine(*b_, CacheMode::Hypic, {}).prefill_segment(block(32, 0))->bytes();
  EngineOptions big;
  Engine reference(*b_, CacheMode::Hypic, big);
  EngineOptions small;
  small.cache_budget_bytes = 4 * entry;  // the 16 documents are 4x this (and chain entries come on top)
  small.tiers.host_budget_bytes = 8 * entry;
  auto disk = std::make_shared<MapDisk>();
  small.tiers.disk = disk;
  Engine tiered(*b_, CacheMode::Hypic, small);
  auto ps = prompts();
  for (int pass = 0; pass < 2; ++pass) {
    // The second pass runs backwards: the documents evicted last (held in host memory) come first, those
    // evicted early only on disk.
    if (pass == 1) std::reverse(ps.begin(), ps.end());
    for (const auto& p : ps) {
      const PromptResult want = reference.run(p);
      const PromptResult got = tiered.run(p);
      ASSERT_EQ(got.logits, want.logits);  // fp32 records decode to the very entries
      EXPECT_EQ(got.computed_tokens, want.computed_tokens);
      ASSERT_EQ(got.blocks.size(), want.blocks.size());
      for (size_t i = 0; i < got.blocks.size(); ++i) EXPECT_EQ(got.blocks[i].hit, want.blocks[i].hit);
    }
  }
  tiered.tiers()->flush();
  const EntryTierStats t = tiered.tiers()->stats();
  const SegmentStoreStats s = tiered.store().stats();
  std::printf("[ metrics  ] device %zu B budget: %lld evictions, %lld hits from below (host %lld, disk %lld), "
              "%lld disk writes, host tier %zu B in %zu entries\n",
              small.cache_budget_bytes, (long long)s.evictions, (long long)s.lower_hits, (long long)t.host_hits,
              (long long)t.disk_hits, (long long)t.disk_writes, t.host_bytes, t.host_entries);
  EXPECT_GT(t.host_hits, 0);
  EXPECT_GT(t.disk_hits, 0);
  EXPECT_LE(s.bytes, small.cache_budget_bytes);
  EXPECT_LE(t.host_bytes, small.tiers.host_budget_bytes);
  EXPECT_EQ(t.dropped, 0);
  EXPECT_EQ(disk->drops, 0);
}

TEST_F(EntryTiersTest, CorruptDiskRecordIsDroppedLoggedAndRecomputed) {
  EngineOptions o;
  o.tiers.disk = std::make_shared<MapDisk>();
  auto* disk = static_cast<MapDisk*>(o.tiers.disk.get());
  const auto ps = prompts();
  PromptResult cold;
  {
    Engine first(*b_, CacheMode::Hypic, o);
    cold = first.run(ps[0]);
  }
  ASSERT_FALSE(disk->records.empty());
  for (auto& [id, rec] : disk->records) rec[rec.size() / 2] ^= 0x01;  // every record on disk damaged
  Engine restarted(*b_, CacheMode::Hypic, o);
  testing::internal::CaptureStderr();
  const PromptResult r = restarted.run(ps[0]);
  const std::string log = testing::internal::GetCapturedStderr();
  EXPECT_NE(log.find("dropped, it will be recomputed"), std::string::npos) << log;
  EXPECT_NE(log.find("checksum"), std::string::npos) << log;
  EXPECT_EQ(r.computed_tokens, cold.computed_tokens);  // nothing served from the damaged records
  for (const BlockOutcome& b : r.blocks) EXPECT_FALSE(b.hit);
  EXPECT_EQ(r.logits, cold.logits);
  EXPECT_GT(disk->drops, 0);
  EXPECT_GT(restarted.tiers()->stats().dropped, 0);
}

}  // namespace
}  // namespace hypic

namespace hypic {
namespace {

// Compact records leave out the whole-segment state: a hit on a prompt's first block then recomputes its
// seam (exact at position 0 in fp32) instead of loading the state, so it computes the seam more tokens than
// a hit on a full entry, with logits within bf16 rounding of it. (The second block is never cached, so
// there is no chain entry to take the whole prefix from.)
TEST_F(EntryTiersTest, CompactRecordsServeTheFirstBlockThroughItsSeam) {
  EngineOptions ref_opt;
  Engine reference(*b_, CacheMode::Hypic, ref_opt);
  EngineOptions o;
  o.cache_budget_bytes = 1;  // nothing stays on the device: every entry goes down to host memory
  o.tiers.host_budget_bytes = size_t{64} << 20;
  o.tiers.codec = parse_cache_format("compact");
  Engine tiered(*b_, CacheMode::Hypic, o);
  const std::vector<PromptBlock> p = {{block(40, 1), BlockCache::Cache}, {block(24, 2), BlockCache::None},
                                      {block(5, 3), BlockCache::None}};
  reference.run(p);
  tiered.run(p);
  const PromptResult want = reference.run(p), got = tiered.run(p);
  ASSERT_TRUE(want.blocks[0].hit);
  ASSERT_TRUE(got.blocks[0].hit);
  EXPECT_EQ(got.computed_tokens, want.computed_tokens + 8);
  EXPECT_GT(tiered.tiers()->stats().host_hits, 0);
  const auto top = [](const std::vector<float>& l) { return std::max_element(l.begin(), l.end()) - l.begin(); };
  EXPECT_EQ(top(got.logits), top(want.logits));
  float worst = 0, range = 0;
  for (size_t i = 0; i < got.logits.size(); ++i) {
    worst = std::max(worst, std::fabs(got.logits[i] - want.logits[i]));
    range = std::max(range, std::fabs(want.logits[i]));
  }
  std::printf("[ metrics  ] compact first block: max logit error %.3g of %.3g\n", worst, range);
  EXPECT_LT(worst, 0.02f * range);
}

}  // namespace
}  // namespace hypic
