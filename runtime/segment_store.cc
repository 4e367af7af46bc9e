#include "runtime/segment_store.h"

#include <algorithm>

namespace hypic {

SegmentLru::Slot* SegmentLru::touch(const std::string& key) {
  auto it = slots_.find(key);
  if (it == slots_.end()) return nullptr;
  lru_.splice(lru_.begin(), lru_, it->second.lru);
  return &it->second;
}

void SegmentLru::evict_to(size_t limit) {
  // Oldest first, skipping pinned entries.
  auto it = lru_.end();
  while (stats_.bytes > limit && it != lru_.begin()) {
    --it;
    auto slot = slots_.find(*it);
    if (slot->second.pinned) continue;
    stats_.bytes -= slot->second.bytes;
    slots_.erase(slot);
    it = lru_.erase(it);
    ++stats_.evictions;
  }
}

void SegmentLru::insert(const std::string& key, Slot slot) {
  if (auto it = slots_.find(key); it != slots_.end()) {
    stats_.bytes -= it->second.bytes;
    if (it->second.pinned) stats_.pinned_bytes -= it->second.bytes;
    lru_.erase(it->second.lru);
    slots_.erase(it);
  }
  if (slot.bytes > budget_ - std::min(budget_, stats_.pinned_bytes)) {
    ++stats_.rejected;
    return;
  }
  evict_to(budget_ - slot.bytes);
  if (slot.pinned) stats_.pinned_bytes += slot.bytes;
  lru_.push_front(key);
  slot.lru = lru_.begin();
  stats_.bytes += slot.bytes;
  slots_.emplace(key, std::move(slot));
  ++stats_.insertions;
}

std::shared_ptr<const void> SegmentLru::find(Kind kind, const SegmentKey& key) {
  std::lock_guard<std::mutex> g(mu_);
  Slot* s = touch(id(kind, key));
  if (kind == Kind::Content) ++(s ? stats_.content_hits : stats_.content_misses);
  else ++(s ? stats_.chain_hits : stats_.chain_misses);
  return s ? s->entry : nullptr;
}

bool SegmentLru::contains(Kind kind, const SegmentKey& key) const {
  std::lock_guard<std::mutex> g(mu_);
  return slots_.count(id(kind, key)) > 0;
}

void SegmentLru::put(Kind kind, const SegmentKey& key, std::shared_ptr<const void> e, size_t bytes, bool pinned) {
  std::lock_guard<std::mutex> g(mu_);
  Slot s;
  s.pinned = pinned;
  s.bytes = bytes;
  s.entry = std::move(e);
  insert(id(kind, key), std::move(s));
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
}

}  // namespace hypic
