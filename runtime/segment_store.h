// The segment store: position-independent entries by content key and exact prefix entries by chain
// key (DESIGN §1.1), under one byte budget with least-recently-used eviction. Entries are shared, so
// evicting one never invalidates a request that already holds it.
#pragma once
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "runtime/segment_entry.h"
#include "runtime/segment_key.h"

namespace hypic {

struct SegmentStoreStats {
  int64_t content_hits = 0, content_misses = 0;
  int64_t chain_hits = 0, chain_misses = 0;
  int64_t insertions = 0, evictions = 0, rejected = 0;  // rejected: does not fit beside pinned entries
  size_t bytes = 0, entries = 0, pinned_bytes = 0;
};

class SegmentStore {
 public:
  explicit SegmentStore(size_t budget_bytes) : budget_(budget_bytes) {}

  std::shared_ptr<const SegmentEntry> find_content(const SegmentKey& key);
  std::shared_ptr<const PrefixEntry> find_chain(const SegmentKey& key);
  // Inserting over an existing key replaces it. An entry larger than the budget is not kept.
  // Pinned entries are never evicted (they still count against the budget).
  void put_content(const SegmentKey& key, std::shared_ptr<const SegmentEntry> e, bool pinned = false);
  void put_chain(const SegmentKey& key, std::shared_ptr<const PrefixEntry> e, bool pinned = false);
  // Looks without counting a hit or miss and without refreshing recency.
  bool contains_content(const SegmentKey& key) const;

  SegmentStoreStats stats() const;
  size_t budget() const { return budget_; }
  void clear();

 private:
  struct Slot {
    std::shared_ptr<const SegmentEntry> content;
    std::shared_ptr<const PrefixEntry> chain;
    size_t bytes = 0;
    bool pinned = false;
    std::list<std::string>::iterator lru;
  };
  static std::string id(char kind, const SegmentKey& k) { return std::string(1, kind) + k.hex(); }
  Slot* touch(const std::string& id);
  void insert(const std::string& id, Slot slot);
  void evict_to(size_t limit);

  mutable std::mutex mu_;
  size_t budget_;
  std::list<std::string> lru_;  // front = most recently used
  std::unordered_map<std::string, Slot> slots_;
  SegmentStoreStats stats_;
};

}  // namespace hypic
