#include "runtime/segment_store.h"

#include <algorithm>

namespace hypic {

double SegmentLru::priority(const Slot& s) const {
  // Recompute cost saved per byte held: every layer runs over each token, so tokens stand for the cost
  // (the layer count is the same for every entry of a store). An empty entry still costs a pass.
  const double cost = static_cast<double>(std::max<int64_t>(s.tokens, 1)) * static_cast<double>(s.hits + 1);
  return clock_ + cost / static_cast<double>(std::max<size_t>(s.bytes, 1));
}

SegmentLru::Slot* SegmentLru::touch(const std::string& key) {
  auto it = slots_.find(key);
  if (it == slots_.end()) return nullptr;
  lru_.splice(lru_.begin(), lru_, it->second.lru);
  ++it->second.hits;
  it->second.priority = priority(it->second);
  return &it->second;
}

void SegmentLru::evict_to(size_t limit, std::vector<Victim>& out) {
  while (stats_.bytes > limit) {
    // The lowest priority, the least recently used among equals (the scan runs oldest first).
    auto victim = lru_.end();
    double lowest = 0;
    for (auto it = lru_.end(); it != lru_.begin();) {
      --it;
      const Slot& s = slots_.at(*it);
      if (s.pinned) continue;
      if (victim == lru_.end() || s.priority < lowest) {
        victim = it;
        lowest = s.priority;
      }
    }
    if (victim == lru_.end()) return;  // only pinned entries left
    auto slot = slots_.find(*victim);
    clock_ = std::max(clock_, slot->second.priority);
    stats_.bytes -= slot->second.bytes;
    out.push_back({slot->first, std::move(slot->second)});
    slots_.erase(slot);
    lru_.erase(victim);
    ++stats_.evictions;
  }
}

void SegmentLru::insert(const std::string& key, Slot slot, std::vector<Victim>& out) {
  if (auto it = slots_.find(key); it != slots_.end()) {
    stats_.bytes -= it->second.bytes;
    if (it->second.pinned) stats_.pinned_bytes -= it->second.bytes;
    slot.hits = std::max(slot.hits, it->second.hits);
    lru_.erase(it->second.lru);
    slots_.erase(it);
  }
  slot.priority = priority(slot);
  if (slot.bytes > budget_ - std::min(budget_, stats_.pinned_bytes)) {
    ++stats_.rejected;
    out.push_back({key, std::move(slot)});  // the lower tier may still hold it
    return;
  }
  evict_to(budget_ - slot.bytes, out);
  if (slot.pinned) stats_.pinned_bytes += slot.bytes;
  lru_.push_front(key);
  slot.lru = lru_.begin();
  stats_.bytes += slot.bytes;
  slots_.emplace(key, std::move(slot));
  ++stats_.insertions;
}

void SegmentLru::hand_down(std::vector<Victim>& victims) {
  if (!lower_) return;
  for (Victim& v : victims)
    lower_->evicted(v.id[0], segment_key_from_hex(std::string_view(v.id).substr(1)), v.slot.entry, v.slot.tokens,
                    v.slot.hits);
}

std::shared_ptr<const void> SegmentLru::find(Kind kind, const SegmentKey& key) {
  const std::string k = id(kind, key);
  {
    std::lock_guard<std::mutex> g(mu_);
    Slot* s = touch(k);
    if (s || !lower_) {
      if (kind == Kind::Content) ++(s ? stats_.content_hits : stats_.content_misses);
      else ++(s ? stats_.chain_hits : stats_.chain_misses);
      return s ? s->entry : nullptr;
    }
  }
  // A miss here: the lower tier, outside the lock (it may copy and decode).
  std::optional<LowerTier::Found> f = lower_->fetch(static_cast<char>(kind), key);
  std::vector<Victim> victims;
  {
    std::lock_guard<std::mutex> g(mu_);
    if (kind == Kind::Content) ++(f ? stats_.content_hits : stats_.content_misses);
    else ++(f ? stats_.chain_hits : stats_.chain_misses);
    if (!f) return nullptr;
    ++stats_.lower_hits;
    Slot s;
    s.entry = f->entry;
    s.bytes = f->bytes;
    s.tokens = f->tokens;
    s.hits = f->hits + 1;
    insert(k, std::move(s), victims);
  }
  hand_down(victims);
  return f->entry;
}

bool SegmentLru::contains(Kind kind, const SegmentKey& key) const {
  std::lock_guard<std::mutex> g(mu_);
  return slots_.count(id(kind, key)) > 0;
}

void SegmentLru::put(Kind kind, const SegmentKey& key, std::shared_ptr<const void> e, size_t bytes, bool pinned,
                     int64_t tokens) {
  std::vector<Victim> victims;
  std::shared_ptr<const void> held = e;
  {
    std::lock_guard<std::mutex> g(mu_);
    Slot s;
    s.pinned = pinned;
    s.bytes = bytes;
    s.tokens = tokens;
    s.entry = std::move(e);
    insert(id(kind, key), std::move(s), victims);
  }
  if (lower_) lower_->stored(static_cast<char>(kind), key, held, tokens);
  hand_down(victims);
}

SegmentStoreStats SegmentLru::stats() const {
  std::lock_guard<std::mutex> g(mu_);
  SegmentStoreStats s = stats_;
  s.entries = slots_.size();
  return s;
}

void SegmentLru::clear() {
  std::lock_guard<std::mutex> g(mu_);
  slots_.clear();
  lru_.clear();
  stats_.bytes = 0;
  stats_.pinned_bytes = 0;
  clock_ = 0;
}

}  // namespace hypic
