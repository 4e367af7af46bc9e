// The segment store: position-independent entries by content key and exact prefix entries by chain
// key, under one byte budget of the backend's memory (the device tier). Entries are shared, so evicting
// one never invalidates a request that already holds it.
//
// Eviction is cost-aware (greedy-dual size-frequency): an entry's priority is the recompute cost it saves
// per byte it holds — tokens (every layer runs over each) times its hit count, over its bytes — plus the
// store's clock, which rises to each evicted entry's priority so that entries not used for a long time
// age out. Ties go to the least recently used. Pinned entries are never evicted.
//
// A lower tier (runtime/entry_tiers.h: host memory, disk) may sit below: every stored entry is offered to
// it (write-through to disk), evicted entries move down to it instead of vanishing, and a miss here asks
// it before the caller computes the block (a hit there is promoted back into this store).
//
// The policy (SegmentLru) does not depend on what an entry holds: BasicSegmentStore types it for one
// pair of entry kinds. SegmentStore holds the engine's entries, whose arrays live in one block of the
// backend's memory (host or device): evicting the last reference frees that memory.
#pragma once
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "runtime/segment_entry.h"
#include "runtime/segment_key.h"

namespace hypic {

struct SegmentStoreStats {
  int64_t content_hits = 0, content_misses = 0;
  int64_t chain_hits = 0, chain_misses = 0;
  int64_t insertions = 0, evictions = 0, rejected = 0;  // rejected: does not fit beside pinned entries
  int64_t lower_hits = 0;  // hits served from a lower tier (counted in content_hits / chain_hits too)
  size_t bytes = 0, entries = 0, pinned_bytes = 0;
};

// What sits below the store (implemented by EntryTiers). Kinds: 'c' content, 'p' chain.
class LowerTier {
 public:
  virtual ~LowerTier() = default;
  struct Found {
    std::shared_ptr<const void> entry;  // decoded into the backend's memory
    size_t bytes = 0;
    int64_t tokens = 0, hits = 0;
  };
  // An entry just stored in the store (the disk tier writes it through).
  virtual void stored(char kind, const SegmentKey& key, const std::shared_ptr<const void>& e, int64_t tokens) = 0;
  // An entry the store evicted (or could not hold): kept below if there is room.
  virtual void evicted(char kind, const SegmentKey& key, const std::shared_ptr<const void>& e, int64_t tokens,
                       int64_t hits) = 0;
  // A miss in the store: the entry from below, or nothing.
  virtual std::optional<Found> fetch(char kind, const SegmentKey& key) = 0;
};

// Untyped cost-aware store under a byte budget; keys are SegmentKeys of two kinds (content, chain).
class SegmentLru {
 public:
  explicit SegmentLru(size_t budget_bytes) : budget_(budget_bytes) {}
  // Puts `lower` below this store (null: none).
  void set_lower(std::shared_ptr<LowerTier> lower) { lower_ = std::move(lower); }

  SegmentStoreStats stats() const;
  size_t budget() const { return budget_; }
  void clear();

 protected:
  enum class Kind : char { Content = 'c', Chain = 'p' };
  // Counts a hit or miss and refreshes recency.
  std::shared_ptr<const void> find(Kind kind, const SegmentKey& key);
  // Inserting over an existing key replaces it. An entry larger than the budget is not kept. `tokens`:
  // what recomputing the entry would run through the model.
  void put(Kind kind, const SegmentKey& key, std::shared_ptr<const void> e, size_t bytes, bool pinned, int64_t tokens);
  bool contains(Kind kind, const SegmentKey& key) const;

 private:
  struct Slot {
    std::shared_ptr<const void> entry;
    size_t bytes = 0;
    bool pinned = false;
    int64_t tokens = 0, hits = 0;
    double priority = 0;
    std::list<std::string>::iterator lru;
  };
  struct Victim {
    std::string id;
    Slot slot;
  };
  static std::string id(Kind kind, const SegmentKey& k) { return std::string(1, static_cast<char>(kind)) + k.hex(); }
  double priority(const Slot& s) const;
  Slot* touch(const std::string& id);
  void insert(const std::string& id, Slot slot, std::vector<Victim>& out);
  void evict_to(size_t limit, std::vector<Victim>& out);
  void hand_down(std::vector<Victim>& victims);

  mutable std::mutex mu_;
  size_t budget_;
  double clock_ = 0;  // greedy-dual aging: the priority of the last evicted entry
  std::shared_ptr<LowerTier> lower_;
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
    const int64_t t = e->size();
    put(Kind::Content, key, std::move(e), b, pinned, t);
  }
  void put_chain(const SegmentKey& key, std::shared_ptr<const ChainEntry> e, bool pinned = false) {
    const size_t b = e->bytes();
    const int64_t t = e->rows();
    put(Kind::Chain, key, std::move(e), b, pinned, t);
  }
  // Looks without counting a hit or miss and without refreshing recency.
  bool contains_content(const SegmentKey& key) const { return contains(Kind::Content, key); }
  bool contains_chain(const SegmentKey& key) const { return contains(Kind::Chain, key); }
};

using SegmentStore = BasicSegmentStore<SegmentEntry, PrefixEntry>;

}  // namespace hypic
