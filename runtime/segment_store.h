// The segment store: position-independent entries by content key and exact prefix entries by chain
// key (DESIGN §1.1), under one byte budget with least-recently-used eviction. Entries are shared, so
// evicting one never invalidates a request that already holds it.
//
// The policy (SegmentLru) does not depend on what an entry holds: BasicSegmentStore types it for one
// pair of entry kinds. SegmentStore holds the engine's entries, whose arrays live in one block of the
// backend's memory (host or device): evicting the last reference frees that memory.
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

// Untyped LRU under a byte budget; keys are SegmentKeys of two kinds (content, chain).
class SegmentLru {
 public:
  explicit SegmentLru(size_t budget_bytes) : budget_(budget_bytes) {}

  SegmentStoreStats stats() const;
  size_t budget() const { return budget_; }
  void clear();

 protected:
  enum class Kind : char { Content = 'c', Chain = 'p' };
  // Counts a hit or miss and refreshes recency.
  std::shared_ptr<const void> find(Kind kind, const SegmentKey& key);
  // Inserting over an existing key replaces it. An entry larger than the budget is not kept.
  void put(Kind kind, const SegmentKey& key, std::shared_ptr<const void> e, size_t bytes, bool pinned);
  bool contains(Kind kind, const SegmentKey& key) const;

 private:
  struct Slot {
    std::shared_ptr<const void> entry;
    size_t bytes = 0;
    bool pinned = false;
    std::list<std::string>::iterator lru;
  };
  static std::string id(Kind kind, const SegmentKey& k) { return std::string(1, static_cast<char>(kind)) + k.hex(); }
  Slot* touch(const std::string& id);
  void insert(const std::string& id, Slot slot);
  void evict_to(size_t limit);

  mutable std::mutex mu_;
  size_t budget_;
  std::list<std::string> lru_;  // front = most recently used
  std::unordered_map<std::string, Slot> slots_;
  SegmentStoreStats stats_;
};

// ContentEntry and ChainEntry provide `size_t bytes() const`.
template <class ContentEntry, class ChainEntry>
class BasicSegmentStore : public SegmentLru {
 public:
  using SegmentLru::SegmentLru;

  std::shared_ptr<const ContentEntry> find_content(const SegmentKey& key) {
    return std::static_pointer_cast<const ContentEntry>(find(Kind::Content, key));
  }
  std::shared_ptr<const ChainEntry> find_chain(const SegmentKey& key) {
    return std::static_pointer_cast<const ChainEntry>(find(Kind::Chain, key));
  }
  // Inserting over an existing key replaces it. An entry larger than the budget is not kept.
  // Pinned entries are never evicted (they still count against the budget).
  void put_content(const SegmentKey& key, std::shared_ptr<const ContentEntry> e, bool pinned = false) {
    const size_t b = e->bytes();
    put(Kind::Content, key, std::move(e), b, pinned);
  }
  void put_chain(const SegmentKey& key, std::shared_ptr<const ChainEntry> e, bool pinned = false) {
    const size_t b = e->bytes();
    put(Kind::Chain, key, std::move(e), b, pinned);
  }
  // Looks without counting a hit or miss and without refreshing recency.
  bool contains_content(const SegmentKey& key) const { return contains(Kind::Content, key); }
};

using SegmentStore = BasicSegmentStore<SegmentEntry, PrefixEntry>;

}  // namespace hypic
