// The cache tiers below the segment store (docs/cache_tiers.md): host memory, then disk. The store (the
// device tier, in the backend's memory) hands every entry it stores down for write-through to disk and
// every entry it evicts down to host memory; a miss in the store looks in host memory, then on disk, and
// a hit there is decoded back into the backend's memory (promoted). Entries below the device are encoded
// records (runtime/entry_codec.h), optionally compacted (bf16 states, zero heads skipped), whose checksum
// is verified once, when they enter host memory (read from disk; records encoded here are trusted): a
// corrupt record is dropped, said so on stderr, and the block is recomputed. Host memory evicts
// cost-aware like the store; with a disk tier it holds nothing the disk lacks, so eviction from it loses
// nothing. Host memory is inclusive: a promoted entry keeps its record there, so evicting it from the
// device again costs no copy and no encoding, and a record read from disk stays there too.
//
// Records in host memory live in the backend's host memory (pinned on CUDA). Where the backend expands
// records on the device (Backend::records_on_device), a promotion checks the header on the host, copies
// the record as it is and expands it with a kernel, all queued on the model's stream without a wait: the
// promotions of one request are issued one after another and the stitch that follows on the same stream
// waits for them (one synchronisation, the request's own). Elsewhere (the CPU) the reference decode runs.
//
// Writes to disk happen on a writer thread: the request that built an entry encodes it (the copy out of
// the backend's memory happens on the caller's thread, ordered with its work) and queues the record; the
// thread writes and syncs it. A queued record already serves hits; destroying the tiers writes what is
// queued. A process killed before a record is written loses only that record (never the index).
#pragma once
#include <cstdint>
#include <condition_variable>
#include <deque>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>

#include "runtime/entry_codec.h"
#include "runtime/segment_store.h"

namespace hypic {

// The disk tier as the runtime sees it (implemented over files and an SQLite index in sdk/). Ids are the
// kind ('c' content, 'p' chain) followed by the key's hex digits.
class EntryDiskStore {
 public:
  virtual ~EntryDiskStore() = default;
  virtual bool contains(const std::string& id) = 0;
  // Durable when it returns (a crash afterwards keeps it; a crash before leaves no trace of it).
  virtual void put(const std::string& id, std::string_view record, int64_t tokens) = 0;
  // The record, its size and checksum verified against the index; nothing when missing. A record that
  // fails the check is dropped (and logged) and nothing is returned.
  virtual std::optional<std::string> get(const std::string& id) = 0;
  // The same, read into host memory of `b` (pinned on CUDA; verified there). The default copies get()'s.
  virtual std::shared_ptr<HostRecord> get_record(const std::string& id, Backend& b);
  // Removes an entry whose record could not be used, logging why.
  virtual void drop(const std::string& id, const std::string& why) = 0;
};

struct EntryTierStats {
  int64_t host_hits = 0, disk_hits = 0, misses = 0;
  int64_t demoted = 0;       // entries evicted from the device into host memory
  int64_t host_evicted = 0;  // entries evicted from host memory
  int64_t disk_writes = 0;
  int64_t dropped = 0;       // records refused when read (checksum, truncation, another model)
  size_t host_bytes = 0, host_entries = 0;
  size_t device_bytes_encoded = 0, record_bytes = 0;  // sizes of the entries encoded so far (compaction)
};

struct EntryTierOptions {
  size_t host_budget_bytes = 0;     // 0: no host tier
  std::shared_ptr<EntryDiskStore> disk;  // null: no disk tier
  EntryCodecOptions codec;
};

class EntryTiers : public LowerTier {
 public:
  EntryTiers(Backend& b, KeyContext ctx, EntryTierOptions o);
  ~EntryTiers() override;
  // Waits until every queued record is on disk.
  void flush();

  void stored(char kind, const SegmentKey& key, const std::shared_ptr<const void>& e, int64_t tokens) override;
  void evicted(char kind, const SegmentKey& key, const std::shared_ptr<const void>& e, int64_t tokens,
               int64_t hits) override;
  std::optional<Found> fetch(char kind, const SegmentKey& key) override;

  EntryTierStats stats() const;
  const EntryTierOptions& options() const { return o_; }

 private:
  struct HostSlot {
    std::shared_ptr<const HostRecord> record;
    int64_t tokens = 0, hits = 0;
    double priority = 0;
    std::list<std::string>::iterator lru;
  };
  // The entry's record in host memory of the backend (packed on the device where the backend can).
  std::shared_ptr<const HostRecord> encode(char kind, const std::shared_ptr<const void>& e);
  // Promotes a record read from `where` (its checksum already verified); nothing (and a log line) when it
  // is refused.
  std::optional<Found> decode(char kind, const std::string& id, std::shared_ptr<const HostRecord> record,
                              const std::string& where);
  void put_host(const std::string& id, std::shared_ptr<const HostRecord> record, int64_t tokens, int64_t hits);
  void write_loop();

  Backend& b_;
  KeyContext ctx_;
  EntryTierOptions o_;
  mutable std::mutex mu_;
  std::list<std::string> lru_;  // front = most recent
  std::unordered_map<std::string, HostSlot> host_;
  double clock_ = 0;
  EntryTierStats stats_;

  // The disk writer: records queued in order, and by id for hits before they are written.
  struct Pending {
    std::string id;
    std::shared_ptr<const HostRecord> record;
    int64_t tokens = 0;
  };
  std::mutex qmu_;
  std::condition_variable qcv_, qdone_;
  std::deque<Pending> queue_;
  std::unordered_map<std::string, std::shared_ptr<const HostRecord>> queued_;
  bool writing_ = false, stop_ = false;
  std::thread writer_;
};

}  // namespace hypic
