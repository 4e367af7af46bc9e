#include "runtime/entry_tiers.h"

#include <algorithm>
#include <cstdio>

#include "runtime/error.h"

namespace hypic {

EntryTiers::EntryTiers(Backend& b, KeyContext ctx, EntryTierOptions o) : b_(b), ctx_(std::move(ctx)), o_(std::move(o)) {
  if (o_.disk) writer_ = std::thread([this] { write_loop(); });
}

EntryTiers::~EntryTiers() {
  if (!writer_.joinable()) return;
  {
    std::lock_guard<std::mutex> g(qmu_);
    stop_ = true;
  }
  qcv_.notify_all();
  writer_.join();  // the loop writes what is queued before it ends
}

void EntryTiers::flush() {
  std::unique_lock<std::mutex> g(qmu_);
  qdone_.wait(g, [&] { return queue_.empty() && !writing_; });
}

void EntryTiers::write_loop() {
  std::unique_lock<std::mutex> g(qmu_);
  for (;;) {
    qcv_.wait(g, [&] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping, and everything is written
    Pending p = std::move(queue_.front());
    queue_.pop_front();
    writing_ = true;
    g.unlock();
    try {
      o_.disk->put(p.id, p.record->view(), p.tokens);
      std::lock_guard<std::mutex> s(mu_);
      ++stats_.disk_writes;
    } catch (const Error& e) {
      // A full or unwritable disk costs the cache an entry, never the request.
      std::fprintf(stderr, "hypic: cache entry %s not written to disk: %s\n", p.id.c_str(), e.what());
    }
    g.lock();
    queued_.erase(p.id);
    writing_ = false;
    qdone_.notify_all();
  }
}

std::shared_ptr<const HostRecord> EntryTiers::encode(char kind, const std::shared_ptr<const void>& e) {
  std::shared_ptr<const HostRecord> r;
  size_t device_bytes = 0;
  const bool device = b_.records_on_device();
  if (kind == 'c') {
    const auto& x = *static_cast<const SegmentEntry*>(e.get());
    r = device ? encode_record(b_, ctx_, x, o_.codec) : std::make_shared<HostRecord>(b_, encode_entry(b_, ctx_, x, o_.codec));
    device_bytes = x.bytes();
  } else {
    const auto& x = *static_cast<const PrefixEntry*>(e.get());
    r = device ? encode_record(b_, ctx_, x, o_.codec) : std::make_shared<HostRecord>(b_, encode_entry(b_, ctx_, x, o_.codec));
    device_bytes = x.bytes();
  }
  std::lock_guard<std::mutex> g(mu_);
  stats_.device_bytes_encoded += device_bytes;
  stats_.record_bytes += r->size();
  return r;
}

void EntryTiers::stored(char kind, const SegmentKey& key, const std::shared_ptr<const void>& e, int64_t tokens) {
  if (!o_.disk) return;
  const std::string id = std::string(1, kind) + key.hex();
  {
    std::lock_guard<std::mutex> g(qmu_);
    if (queued_.count(id)) return;
  }
  if (o_.disk->contains(id)) return;
  std::shared_ptr<const HostRecord> record = encode(kind, e);
  {
    std::lock_guard<std::mutex> g(qmu_);
    if (!queued_.emplace(id, record).second) return;
    queue_.push_back({id, std::move(record), tokens});
  }
  qcv_.notify_one();
}

void EntryTiers::evicted(char kind, const SegmentKey& key, const std::shared_ptr<const void>& e, int64_t tokens,
                         int64_t hits) {
  if (o_.host_budget_bytes == 0) return;  // the disk tier (if any) already holds it
  const std::string id = std::string(1, kind) + key.hex();
  {
    std::lock_guard<std::mutex> g(mu_);
    ++stats_.demoted;
    if (auto it = host_.find(id); it != host_.end()) {  // promoted from here earlier: its record is current
      it->second.hits = std::max(it->second.hits, hits);
      return;
    }
  }
  put_host(id, encode(kind, e), tokens, hits);
}

void EntryTiers::put_host(const std::string& id, std::shared_ptr<const HostRecord> record, int64_t tokens,
                          int64_t hits) {
  std::lock_guard<std::mutex> g(mu_);
  if (auto it = host_.find(id); it != host_.end()) {
    stats_.host_bytes -= it->second.record->size();
    lru_.erase(it->second.lru);
    host_.erase(it);
  }
  if (record->size() > o_.host_budget_bytes) return;
  // Cost-aware like the store: recompute cost saved per byte, aged by the clock; oldest first on ties.
  auto priority = [&](int64_t t, int64_t h, size_t bytes) {
    return clock_ + static_cast<double>(std::max<int64_t>(t, 1)) * static_cast<double>(h + 1) /
                        static_cast<double>(std::max<size_t>(bytes, 1));
  };
  while (stats_.host_bytes + record->size() > o_.host_budget_bytes && !lru_.empty()) {
    auto victim = lru_.end();
    double lowest = 0;
    for (auto it = lru_.end(); it != lru_.begin();) {
      --it;
      const double p = host_.at(*it).priority;
      if (victim == lru_.end() || p < lowest) {
        victim = it;
        lowest = p;
      }
    }
    auto slot = host_.find(*victim);
    clock_ = std::max(clock_, slot->second.priority);
    stats_.host_bytes -= slot->second.record->size();
    host_.erase(slot);
    lru_.erase(victim);
    ++stats_.host_evicted;
  }
  HostSlot s;
  s.tokens = tokens;
  s.hits = hits;
  s.priority = priority(tokens, hits, record->size());
  stats_.host_bytes += record->size();
  s.record = std::move(record);
  lru_.push_front(id);
  s.lru = lru_.begin();
  host_.emplace(id, std::move(s));
}

std::optional<LowerTier::Found> EntryTiers::decode(char kind, const std::string& id,
                                                   std::shared_ptr<const HostRecord> record, const std::string& where) {
  Found f;
  const bool device = b_.records_on_device();
  try {
    if (kind == 'c') {
      auto e = device ? promote_segment_entry(b_, ctx_, std::move(record), where, /*verified=*/true)
                      : decode_segment_entry(b_, ctx_, record->view(), where, /*verified=*/true);
      f.bytes = e->bytes();
      f.tokens = e->size();
      f.entry = std::move(e);
    } else {
      auto e = device ? promote_prefix_entry(b_, ctx_, std::move(record), where, /*verified=*/true)
                      : decode_prefix_entry(b_, ctx_, record->view(), where, /*verified=*/true);
      f.bytes = e->bytes();
      f.tokens = e->rows();
      f.entry = std::move(e);
    }
  } catch (const FormatError& err) {
    std::fprintf(stderr, "hypic: cache entry %s dropped, it will be recomputed: %s\n", id.c_str(), err.what());
    std::lock_guard<std::mutex> g(mu_);
    ++stats_.dropped;
    return std::nullopt;
  }
  return f;
}

std::optional<LowerTier::Found> EntryTiers::fetch(char kind, const SegmentKey& key) {
  const std::string id = std::string(1, kind) + key.hex();
  std::shared_ptr<const HostRecord> record;
  int64_t hits = 0;
  {
    std::lock_guard<std::mutex> g(mu_);
    if (auto it = host_.find(id); it != host_.end()) {
      // Promoted; the record stays (inclusive), refreshed as used.
      record = it->second.record;
      hits = ++it->second.hits;
      lru_.splice(lru_.begin(), lru_, it->second.lru);
      it->second.priority = clock_ + static_cast<double>(std::max<int64_t>(it->second.tokens, 1)) *
                                         static_cast<double>(hits + 1) / static_cast<double>(std::max<size_t>(record->size(), 1));
    }
  }
  if (record) {
    std::optional<Found> f = decode(kind, id, record, "host tier entry " + id);
    if (f) {
      f->hits = hits;
      std::lock_guard<std::mutex> g(mu_);
      ++stats_.host_hits;
      return f;
    }
    std::lock_guard<std::mutex> g(mu_);  // refused: it goes
    if (auto it = host_.find(id); it != host_.end() && it->second.record == record) {
      stats_.host_bytes -= record->size();
      lru_.erase(it->second.lru);
      host_.erase(it);
    }
  }
  if (o_.disk) {
    std::shared_ptr<const HostRecord> q;
    {
      std::lock_guard<std::mutex> g(qmu_);
      if (auto it = queued_.find(id); it != queued_.end()) q = it->second;
    }
    if (q) {  // not on disk yet (encoded here: trusted)
      std::optional<Found> f = decode(kind, id, q, "queued disk entry " + id);
      if (f) {
        std::lock_guard<std::mutex> g(mu_);
        ++stats_.disk_hits;
        return f;
      }
    }
    std::shared_ptr<const HostRecord> r;
    try {
      r = o_.disk->get_record(id, b_);  // verified as it is read
    } catch (const FormatError& err) {
      std::fprintf(stderr, "hypic: cache entry %s dropped, it will be recomputed: %s\n", id.c_str(), err.what());
      {
        std::lock_guard<std::mutex> g(mu_);
        ++stats_.dropped;
      }
      o_.disk->drop(id, "refused when read");
    }
    if (r) {
      std::optional<Found> f = decode(kind, id, r, "disk tier entry " + id);
      if (f) {
        // Kept in host memory (verified, pinned): the next hit after an eviction needs no disk read.
        if (o_.host_budget_bytes > 0) put_host(id, std::move(r), f->tokens, 0);
        std::lock_guard<std::mutex> g(mu_);
        ++stats_.disk_hits;
        return f;
      }
      o_.disk->drop(id, "refused when decoded");
    }
  }
  std::lock_guard<std::mutex> g(mu_);
  ++stats_.misses;
  return std::nullopt;
}

std::shared_ptr<HostRecord> EntryDiskStore::get_record(const std::string& id, Backend& b) {
  std::optional<std::string> r = get(id);
  if (!r) return nullptr;
  // Verified here, as it enters host memory: the promotion does not compute the checksum again.
  if (!record_checksum_ok(*r)) throw FormatError("disk tier entry " + id + ": cache entry checksum mismatch (torn or corrupt)");
  return std::make_shared<HostRecord>(b, *r);
}

EntryTierStats EntryTiers::stats() const {
  std::lock_guard<std::mutex> g(mu_);
  EntryTierStats s = stats_;
  s.host_entries = host_.size();
  return s;
}

}  // namespace hypic
