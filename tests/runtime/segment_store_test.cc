#include "runtime/segment_store.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <vector>

namespace hypic {
namespace {

// A block of host memory standing in for a backend's allocation: the store only reads bytes().
struct TestMemory : Memory {
  explicit TestMemory(size_t n) : buf(n) {
    data_ = buf.data();
    bytes_ = n;
  }
  std::vector<char> buf;
};

// An entry holding `floats` fp32 values in its one memory block and no tokens, so that
// SegmentEntry::bytes() = mem bytes + tokens * sizeof(int) = 4 * floats.
std::shared_ptr<SegmentEntry> entry_of_bytes(size_t floats) {
  auto e = std::make_shared<SegmentEntry>();
  e->mem = std::make_unique<TestMemory>(floats * sizeof(float));
  e->linear.resize(1);
  e->linear[0].body = static_cast<float*>(e->mem->data());
  std::fill_n(e->linear[0].body, floats, 1.0f);
  return e;
}

SegmentKey key(int i) {
  KeyContext ctx{"m", "t", 8};
  const int ids[1] = {i};
  return content_key(ctx, ids);
}

TEST(SegmentStore, HitsMissesAndBytes) {
  SegmentStore s(1 << 20);
  EXPECT_EQ(s.find_content(key(1)), nullptr);
  s.put_content(key(1), entry_of_bytes(100));
  EXPECT_NE(s.find_content(key(1)), nullptr);
  auto st = s.stats();
  EXPECT_EQ(st.content_hits, 1);
  EXPECT_EQ(st.content_misses, 1);
  EXPECT_EQ(st.bytes, 400u);
  EXPECT_EQ(st.entries, 1u);
}

TEST(SegmentStore, EvictsLeastRecentlyUsedWithinBudget) {
  SegmentStore s(1000);  // room for two 400-byte entries
  s.put_content(key(1), entry_of_bytes(100));
  s.put_content(key(2), entry_of_bytes(100));
  ASSERT_NE(s.find_content(key(1)), nullptr);  // 1 is now more recent than 2
  s.put_content(key(3), entry_of_bytes(100));
  EXPECT_TRUE(s.contains_content(key(1)));
  EXPECT_FALSE(s.contains_content(key(2)));
  EXPECT_TRUE(s.contains_content(key(3)));
  EXPECT_EQ(s.stats().evictions, 1);
  EXPECT_LE(s.stats().bytes, 1000u);
}

TEST(SegmentStore, EntryLargerThanBudgetIsRejectedAndKeepsOthers) {
  SegmentStore s(1000);
  s.put_content(key(1), entry_of_bytes(100));
  s.put_content(key(2), entry_of_bytes(1000));
  EXPECT_TRUE(s.contains_content(key(1)));
  EXPECT_FALSE(s.contains_content(key(2)));
  EXPECT_EQ(s.stats().rejected, 1);
}

TEST(SegmentStore, EvictedEntryStaysValidForItsHolder) {
  SegmentStore s(500);
  s.put_content(key(1), entry_of_bytes(100));
  auto held = s.find_content(key(1));
  s.put_content(key(2), entry_of_bytes(100));  // evicts 1
  EXPECT_FALSE(s.contains_content(key(1)));
  ASSERT_NE(held->mem, nullptr);
  EXPECT_EQ(held->mem->bytes(), 100u * sizeof(float));
  EXPECT_EQ(held->linear[0].body, static_cast<float*>(held->mem->data()));
  EXPECT_EQ(held->linear[0].body[99], 1.0f);
}

TEST(SegmentStore, ContentAndChainKeysAreSeparate) {
  SegmentStore s(1 << 20);
  s.put_content(key(1), entry_of_bytes(10));
  EXPECT_EQ(s.find_chain(key(1)), nullptr);
  s.put_chain(key(1), std::make_shared<PrefixEntry>());
  EXPECT_NE(s.find_chain(key(1)), nullptr);
  EXPECT_NE(s.find_content(key(1)), nullptr);
}

}  // namespace
}  // namespace hypic

namespace hypic {
namespace {

TEST(SegmentStore, PinnedEntriesSurviveEviction) {
  SegmentStore s(1000);
  s.put_content(key(1), entry_of_bytes(100), /*pinned=*/true);
  s.put_content(key(2), entry_of_bytes(100));
  s.put_content(key(3), entry_of_bytes(100));  // must evict 2, not the older pinned 1
  EXPECT_TRUE(s.contains_content(key(1)));
  EXPECT_FALSE(s.contains_content(key(2)));
  EXPECT_TRUE(s.contains_content(key(3)));
  EXPECT_EQ(s.stats().pinned_bytes, 400u);
  // An entry that only fits by evicting pinned data is rejected.
  s.put_content(key(4), entry_of_bytes(200));
  EXPECT_FALSE(s.contains_content(key(4)));
  EXPECT_TRUE(s.contains_content(key(1)));
}

}  // namespace
}  // namespace hypic

namespace hypic {
namespace {

std::shared_ptr<SegmentEntry> entry_of(size_t floats, int tokens) {
  auto e = entry_of_bytes(floats);
  e->tokens.assign(static_cast<size_t>(tokens), 1);
  return e;
}

TEST(SegmentStore, EvictionKeepsWhatSavesTheMostRecomputePerByte) {
  SegmentStore s(1300);
  s.put_content(key(1), entry_of(100, 100));  // 800 bytes, 100 tokens
  s.put_content(key(2), entry_of(100, 1));    // 404 bytes, 1 token: newer, but saves little per byte
  s.put_content(key(3), entry_of(100, 1));    // must evict one: 2, not the older 1
  EXPECT_TRUE(s.contains_content(key(1)));
  EXPECT_FALSE(s.contains_content(key(2)));
  EXPECT_TRUE(s.contains_content(key(3)));
}

// A lower tier that keeps what it is handed and serves it back.
struct MapTier : LowerTier {
  std::map<std::string, std::shared_ptr<const void>> kept;
  int stored_count = 0;
  void stored(char, const SegmentKey&, const std::shared_ptr<const void>&, int64_t) override { ++stored_count; }
  void evicted(char kind, const SegmentKey& k, const std::shared_ptr<const void>& e, int64_t, int64_t) override {
    kept[std::string(1, kind) + k.hex()] = e;
  }
  std::optional<Found> fetch(char kind, const SegmentKey& k) override {
    auto it = kept.find(std::string(1, kind) + k.hex());
    if (it == kept.end()) return std::nullopt;
    Found f;
    f.entry = it->second;
    f.bytes = static_cast<const SegmentEntry*>(it->second.get())->bytes();
    kept.erase(it);
    return f;
  }
};

TEST(SegmentStore, EvictedEntriesGoDownAndMissesArePromoted) {
  auto lower = std::make_shared<MapTier>();
  SegmentStore s(1000);
  s.set_lower(lower);
  auto first = entry_of_bytes(100);
  s.put_content(key(1), first);
  s.put_content(key(2), entry_of_bytes(100));
  s.put_content(key(3), entry_of_bytes(100));  // 1 goes down
  EXPECT_EQ(lower->stored_count, 3);
  ASSERT_EQ(lower->kept.count("c" + key(1).hex()), 1u);
  EXPECT_FALSE(s.contains_content(key(1)));
  EXPECT_EQ(s.find_content(key(1)), first);  // promoted back (and another one goes down)
  EXPECT_TRUE(s.contains_content(key(1)));
  EXPECT_EQ(s.stats().lower_hits, 1);
  EXPECT_EQ(s.stats().content_hits, 1);
  EXPECT_EQ(lower->kept.size(), 1u);
  EXPECT_EQ(s.find_content(key(9)), nullptr);
  EXPECT_EQ(s.stats().content_misses, 1);
  // An entry larger than the budget is still handed down.
  s.put_content(key(4), entry_of_bytes(1000));
  EXPECT_EQ(lower->kept.count("c" + key(4).hex()), 1u);
}

}  // namespace
}  // namespace hypic
