#include "runtime/segment_store.h"

#include <algorithm>

namespace hypic {

SegmentStore::Slot* SegmentStore::touch(const std::string& key) {
  auto it = slots_.find(key);
  if (it == slots_.end()) return nullptr;
  lru_.splice(lru_.begin(), lru_, it->second.lru);
  return &it->second;
}

void SegmentStore::evict_to(size_t limit) {
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

void SegmentStore::insert(const std::string& key, Slot slot) {
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

std::shared_ptr<const SegmentEntry> SegmentStore::find_content(const SegmentKey& key) {
  std::lock_guard<std::mutex> g(mu_);
  Slot* s = touch(id('c', key));
  ++(s ? stats_.content_hits : stats_.content_misses);
  return s ? s->content : nullptr;
}

std::shared_ptr<const PrefixEntry> SegmentStore::find_chain(const SegmentKey& key) {
  std::lock_guard<std::mutex> g(mu_);
  Slot* s = touch(id('p', key));
  ++(s ? stats_.chain_hits : stats_.chain_misses);
  return s ? s->chain : nullptr;
}

bool SegmentStore::contains_content(const SegmentKey& key) const {
  std::lock_guard<std::mutex> g(mu_);
  return slots_.count(id('c', key)) > 0;
}

void SegmentStore::put_content(const SegmentKey& key, std::shared_ptr<const SegmentEntry> e, bool pinned) {
  std::lock_guard<std::mutex> g(mu_);
  Slot s;
  s.pinned = pinned;
  s.bytes = e->bytes();
  s.content = std::move(e);
  insert(id('c', key), std::move(s));
}

void SegmentStore::put_chain(const SegmentKey& key, std::shared_ptr<const PrefixEntry> e, bool pinned) {
  std::lock_guard<std::mutex> g(mu_);
  Slot s;
  s.pinned = pinned;
  s.bytes = e->bytes();
  s.chain = std::move(e);
  insert(id('p', key), std::move(s));
}

SegmentStoreStats SegmentStore::stats() const {
  std::lock_guard<std::mutex> g(mu_);
  SegmentStoreStats s = stats_;
  s.entries = slots_.size();
  return s;
}

void SegmentStore::clear() {
  std::lock_guard<std::mutex> g(mu_);
  slots_.clear();
  lru_.clear();
  stats_.bytes = 0;
  stats_.pinned_bytes = 0;
}

}  // namespace hypic
