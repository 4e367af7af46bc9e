#include "runtime/segment_store.h"

namespace hypic {

SegmentStore::Slot* SegmentStore::touch(const std::string& key) {
  auto it = slots_.find(key);
  if (it == slots_.end()) return nullptr;
  lru_.splice(lru_.begin(), lru_, it->second.lru);
  return &it->second;
}

void SegmentStore::evict_to(size_t limit) {
  while (stats_.bytes > limit && !lru_.empty()) {
    auto it = slots_.find(lru_.back());
    stats_.bytes -= it->second.bytes;
    slots_.erase(it);
    lru_.pop_back();
    ++stats_.evictions;
  }
}

void SegmentStore::insert(const std::string& key, Slot slot) {
  if (slot.bytes > budget_) {
    ++stats_.rejected;
    return;
  }
  if (auto it = slots_.find(key); it != slots_.end()) {
    stats_.bytes -= it->second.bytes;
    lru_.erase(it->second.lru);
    slots_.erase(it);
  }
  evict_to(budget_ - slot.bytes);
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

void SegmentStore::put_content(const SegmentKey& key, std::shared_ptr<const SegmentEntry> e) {
  std::lock_guard<std::mutex> g(mu_);
  Slot s;
  s.bytes = e->bytes();
  s.content = std::move(e);
  insert(id('c', key), std::move(s));
}

void SegmentStore::put_chain(const SegmentKey& key, std::shared_ptr<const PrefixEntry> e) {
  std::lock_guard<std::mutex> g(mu_);
  Slot s;
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
}

}  // namespace hypic
