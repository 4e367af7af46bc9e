// hypic::sdk::CacheDir — the disk tier of the segment cache (docs/cache_tiers.md): a directory with one
// file per entry (entries/<id>.ent, an encoded record of runtime/entry_codec.h) and an SQLite index
// (index.sqlite, WAL) of ids, kinds, sizes, tokens, checksums, hit counts and the key context each entry
// was built under, within a byte budget.
//
// Crash safety: a record is written to a temporary file, synced, renamed into place and the directory
// synced before its index row is committed, so a process killed at any moment leaves either a committed
// entry that is whole or no entry (a leftover temporary or unindexed file is removed at the next open).
// Every read verifies the file's size and checksum against the index; a file that fails is dropped, the
// drop is logged on stderr, and the caller recomputes the block.
#pragma once
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "runtime/entry_tiers.h"
#include "sdk/sqlite_db.h"

namespace hypic::sdk {

struct CacheDirEntry {
  std::string id;  // kind ('c' content, 'p' chain) + the key's 32 hex digits
  int64_t bytes = 0, tokens = 0, hits = 0;
  uint64_t checksum = 0;
  double created = 0, last_used = 0;  // seconds since the epoch
};

struct CacheDirStats {
  int64_t entries = 0, content_entries = 0, chain_entries = 0;
  int64_t bytes = 0, tokens = 0, hits = 0;
  int64_t budget_bytes = 0;
};

struct CacheDirVerify {
  int64_t checked = 0, intact = 0, dropped = 0;
  std::vector<std::string> problems;  // one line per dropped entry: id and why
};

class CacheDir : public EntryDiskStore {
 public:
  // Opens (creating) the cache directory `dir` with a byte budget (0: unlimited). Throws IoError when the
  // directory cannot be made or written, FormatError when its index is not a hypic cache index.
  static std::shared_ptr<CacheDir> open(const std::string& dir, int64_t budget_bytes = 0);

  bool contains(const std::string& id) override;
  void put(const std::string& id, std::string_view record, int64_t tokens) override;
  std::optional<std::string> get(const std::string& id) override;
  // Read straight into `b`'s host memory (pinned on CUDA) and verified there.
  std::shared_ptr<HostRecord> get_record(const std::string& id, Backend& b) override;
  void drop(const std::string& id, const std::string& why) override;

  std::vector<CacheDirEntry> list();
  CacheDirStats stats();
  // Reads every entry back and checks it (size, checksum, a well-formed record); drops those that fail.
  CacheDirVerify verify();
  // Removes every entry; returns how many there were.
  int64_t clear();

  const std::string& dir() const { return dir_; }
  std::string entry_path(const std::string& id) const;

 private:
  CacheDir(std::string dir, Database db, int64_t budget);
  void check_id(const std::string& id) const;
  void evict_to_budget();
  void remove_unindexed_files();

  std::string dir_;
  Database db_;
  int64_t budget_;
  uint64_t tmp_counter_ = 0;
  std::recursive_mutex mu_;  // one operation at a time (an engine's tiers may call from several threads)
};

}  // namespace hypic::sdk
