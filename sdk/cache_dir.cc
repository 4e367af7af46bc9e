#include "sdk/cache_dir.h"

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <set>

#include <csignal>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtime/entry_codec.h"
#include "runtime/error.h"

namespace hypic::sdk {
namespace fs = std::filesystem;
namespace {

constexpr int kIndexVersion = 1;
constexpr const char* kSchema =
    "CREATE TABLE entries(id TEXT PRIMARY KEY, kind TEXT NOT NULL, bytes INTEGER NOT NULL, tokens INTEGER NOT NULL,"
    " checksum INTEGER NOT NULL, hits INTEGER NOT NULL DEFAULT 0, tier TEXT NOT NULL DEFAULT 'disk',"
    " format INTEGER NOT NULL, model TEXT NOT NULL, tokenizer TEXT NOT NULL, seam INTEGER NOT NULL,"
    " precision TEXT NOT NULL, created REAL NOT NULL, last_used REAL NOT NULL)";

double now_s() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

int64_t as_int(uint64_t v) {
  int64_t i;
  std::memcpy(&i, &v, 8);
  return i;
}
uint64_t as_uint(int64_t v) {
  uint64_t u;
  std::memcpy(&u, &v, 8);
  return u;
}

[[noreturn]] void io_fail(const std::string& path, const std::string& what) {
  throw IoError(path + ": " + what + ": " + std::strerror(errno));
}

void write_all(int fd, std::string_view data, const std::string& path) {
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      io_fail(path, "cannot write");
    }
    done += static_cast<size_t>(n);
  }
}

void fsync_dir(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0) io_fail(dir, "cannot open directory");
  const int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0) io_fail(dir, "cannot sync directory");
}

std::optional<std::string> read_whole(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return std::nullopt;
  std::string out;
  struct stat st {};
  if (::fstat(fd, &st) == 0 && st.st_size > 0) out.reserve(static_cast<size_t>(st.st_size));
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return out;
}

}  // namespace

std::shared_ptr<CacheDir> CacheDir::open(const std::string& dir, int64_t budget_bytes) {
  if (dir.empty()) throw InvalidArgument("cache directory: empty path");
  std::error_code ec;
  fs::create_directories(fs::path(dir) / "entries", ec);
  if (ec) throw IoError(dir + ": cannot create the cache directory: " + ec.message());
  if (!fs::is_directory(dir)) throw IoError(dir + ": not a directory");
  Database db = Database::open((fs::path(dir) / "index.sqlite").string(), "segment-cache", kIndexVersion, kSchema);
  // WAL commits survive a killed process without a sync each; a power loss may roll back the last ones,
  // which leaves whole files without rows (removed at the next open), never a row without its file. Hit
  // counts are then updated on every read without a disk sync.
  db.exec("PRAGMA synchronous=NORMAL");
  std::shared_ptr<CacheDir> c(new CacheDir(dir, std::move(db), budget_bytes));
  c->remove_unindexed_files();
  return c;
}

CacheDir::CacheDir(std::string dir, Database db, int64_t budget) : dir_(std::move(dir)), db_(std::move(db)), budget_(budget) {}

std::string CacheDir::entry_path(const std::string& id) const { return (fs::path(dir_) / "entries" / (id + ".ent")).string(); }

void CacheDir::check_id(const std::string& id) const {
  // The id becomes a file name: only the kind letter and hex digits.
  const bool ok = id.size() == 33 && (id[0] == 'c' || id[0] == 'p') &&
                  id.find_first_not_of("0123456789abcdef", 1) == std::string::npos;
  if (!ok) throw InvalidArgument("cache entry id '" + id + "' is not a kind letter and 32 hex digits");
}

// After a crash: temporaries of interrupted writes and files whose index row was never committed (or
// was deleted before the file) go; index rows whose file is missing go too. Another process may be
// writing into the same directory right now: a temporary whose writer (its pid is in the name) is alive,
// and an unindexed entry file younger than a minute (renamed, its row not yet committed), stay.
void CacheDir::remove_unindexed_files() {
  std::lock_guard<std::recursive_mutex> g(mu_);
  std::set<std::string> indexed;
  {
    Statement s = db_.prepare("SELECT id FROM entries");
    while (s.step()) indexed.insert(s.text(0));
  }
  std::set<std::string> present;
  for (const auto& f : fs::directory_iterator(fs::path(dir_) / "entries")) {
    const std::string name = f.path().filename().string();
    const bool ent = name.size() == 37 && name.ends_with(".ent");
    if (ent && indexed.count(name.substr(0, 33))) {
      present.insert(name.substr(0, 33));
      continue;
    }
    std::error_code ec;
    const auto age = fs::file_time_type::clock::now() - fs::last_write_time(f.path(), ec);
    if (ent && !ec && age < std::chrono::minutes(1)) continue;
    if (const size_t at = name.find(".tmp."); !ent && at != std::string::npos) {
      const std::string pid = name.substr(at + 5, name.find('.', at + 5) - (at + 5));
      if (!pid.empty() && pid.size() < 10 && pid.find_first_not_of("0123456789") == std::string::npos &&
          ::kill(static_cast<pid_t>(std::stoll(pid)), 0) == 0)
        continue;
    }
    fs::remove(f.path(), ec);
  }
  Transaction t(db_);
  for (const std::string& id : indexed)
    if (!present.count(id)) db_.prepare("DELETE FROM entries WHERE id = ?").bind(1, id).run();
  t.commit();
}

bool CacheDir::contains(const std::string& id) {
  std::lock_guard<std::recursive_mutex> g(mu_);
  Statement s = db_.prepare("SELECT 1 FROM entries WHERE id = ?");
  s.bind(1, id);
  return s.step();
}

void CacheDir::put(const std::string& id, std::string_view record, int64_t tokens) {
  check_id(id);
  const EntryRecordInfo info = inspect_entry(record, "cache entry " + id);
  std::lock_guard<std::recursive_mutex> g(mu_);
  const std::string final_path = entry_path(id);
  const std::string tmp = final_path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(tmp_counter_++);
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) io_fail(tmp, "cannot create");
  try {
    write_all(fd, record, tmp);
    if (::fsync(fd) != 0) io_fail(tmp, "cannot sync");
  } catch (...) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  ::close(fd);
  if (::rename(tmp.c_str(), final_path.c_str()) != 0) {
    ::unlink(tmp.c_str());
    io_fail(final_path, "cannot rename into place");
  }
  fsync_dir((fs::path(dir_) / "entries").string());
  const double t = now_s();
  db_.prepare(
         "INSERT OR REPLACE INTO entries(id, kind, bytes, tokens, checksum, hits, format, model, tokenizer, seam, "
         "precision, created, last_used) VALUES(?, ?, ?, ?, ?, 0, ?, ?, ?, ?, ?, ?, ?)")
      .bind(1, id)
      .bind(2, std::string(1, id[0]))
      .bind(3, static_cast<int64_t>(record.size()))
      .bind(4, tokens)
      .bind(5, as_int(entry_checksum(record.substr(0, record.size() - 8))))
      .bind(6, static_cast<int64_t>(kEntryFormatVersion))
      .bind(7, info.model_fingerprint)
      .bind(8, info.tokenizer_fingerprint)
      .bind(9, static_cast<int64_t>(info.seam_width))
      .bind(10, std::string(precision_name(info.precision)))
      .bind(11, t)
      .bind(12, t)
      .run();
  evict_to_budget();
}

void CacheDir::evict_to_budget() {
  if (budget_ <= 0) return;
  for (;;) {
    int64_t total = 0;
    {
      Statement s = db_.prepare("SELECT coalesce(sum(bytes), 0) FROM entries");
      if (s.step()) total = s.integer(0);
    }
    if (total <= budget_) return;
    // Cost-aware: the least recompute cost saved per byte (tokens x (hits + 1) / bytes), oldest first.
    std::string victim;
    {
      Statement s = db_.prepare(
          "SELECT id FROM entries ORDER BY (max(tokens, 1) * (hits + 1) * 1.0 / max(bytes, 1)), last_used LIMIT 1");
      if (!s.step()) return;
      victim = s.text(0);
    }
    // The row goes first: a crash between leaves an unindexed file, removed at the next open.
    db_.prepare("DELETE FROM entries WHERE id = ?").bind(1, victim).run();
    std::error_code ec;
    fs::remove(entry_path(victim), ec);
  }
}

std::optional<std::string> CacheDir::get(const std::string& id) {
  check_id(id);
  std::lock_guard<std::recursive_mutex> g(mu_);
  int64_t bytes = 0;
  uint64_t checksum = 0;
  {
    Statement s = db_.prepare("SELECT bytes, checksum FROM entries WHERE id = ?");
    s.bind(1, id);
    if (!s.step()) return std::nullopt;
    bytes = s.integer(0);
    checksum = as_uint(s.integer(1));
  }
  std::optional<std::string> r = read_whole(entry_path(id));
  std::string why;
  if (!r) why = "its file is missing";
  else if (static_cast<int64_t>(r->size()) != bytes)
    why = "its file has " + std::to_string(r->size()) + " bytes, the index says " + std::to_string(bytes);
  else if (r->size() < 8 || entry_checksum(std::string_view(*r).substr(0, r->size() - 8)) != checksum)
    why = "its checksum does not match the index";
  if (!why.empty()) {
    drop(id, why);
    return std::nullopt;
  }
  db_.prepare("UPDATE entries SET hits = hits + 1, last_used = ? WHERE id = ?").bind(1, now_s()).bind(2, id).run();
  return r;
}

std::shared_ptr<HostRecord> CacheDir::get_record(const std::string& id, Backend& b) {
  check_id(id);
  std::lock_guard<std::recursive_mutex> g(mu_);
  int64_t bytes = 0;
  uint64_t checksum = 0;
  {
    Statement s = db_.prepare("SELECT bytes, checksum FROM entries WHERE id = ?");
    s.bind(1, id);
    if (!s.step()) return nullptr;
    bytes = s.integer(0);
    checksum = as_uint(s.integer(1));
  }
  std::shared_ptr<HostRecord> r;
  std::string why;
  const int fd = ::open(entry_path(id).c_str(), O_RDONLY);
  struct stat st {};
  if (fd < 0) {
    why = "its file is missing";
  } else if (::fstat(fd, &st) != 0 || st.st_size != bytes) {
    why = "its file has " + std::to_string(st.st_size) + " bytes, the index says " + std::to_string(bytes);
  } else {
    // One read of the whole file into the record's (pinned) memory: no copy between.
    r = std::make_shared<HostRecord>(b, static_cast<size_t>(bytes));
    size_t at = 0;
    while (at < r->size()) {
      const ssize_t n = ::read(fd, r->data() + at, r->size() - at);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      at += static_cast<size_t>(n);
    }
    if (at != r->size()) why = "its file ended after " + std::to_string(at) + " of " + std::to_string(bytes) + " bytes";
  }
  if (fd >= 0) ::close(fd);
  if (why.empty() && (r->size() < 8 || entry_checksum(r->view().substr(0, r->size() - 8)) != checksum))
    why = "its checksum does not match the index";
  if (!why.empty()) {
    drop(id, why);
    return nullptr;
  }
  db_.prepare("UPDATE entries SET hits = hits + 1, last_used = ? WHERE id = ?").bind(1, now_s()).bind(2, id).run();
  return r;
}

void CacheDir::drop(const std::string& id, const std::string& why) {
  check_id(id);
  std::lock_guard<std::recursive_mutex> g(mu_);
  const std::string path = entry_path(id);
  std::fprintf(stderr, "hypic: cache entry %s (%s) dropped, it will be recomputed: %s\n", id.c_str(), path.c_str(),
               why.c_str());
  db_.prepare("DELETE FROM entries WHERE id = ?").bind(1, id).run();
  std::error_code ec;
  fs::remove(path, ec);
}

std::vector<CacheDirEntry> CacheDir::list() {
  std::lock_guard<std::recursive_mutex> g(mu_);
  std::vector<CacheDirEntry> out;
  Statement s = db_.prepare("SELECT id, bytes, tokens, hits, checksum, created, last_used FROM entries ORDER BY last_used DESC");
  while (s.step()) {
    CacheDirEntry e;
    e.id = s.text(0);
    e.bytes = s.integer(1);
    e.tokens = s.integer(2);
    e.hits = s.integer(3);
    e.checksum = as_uint(s.integer(4));
    e.created = s.real(5);
    e.last_used = s.real(6);
    out.push_back(std::move(e));
  }
  return out;
}

CacheDirStats CacheDir::stats() {
  std::lock_guard<std::recursive_mutex> g(mu_);
  CacheDirStats st;
  st.budget_bytes = budget_;
  Statement s = db_.prepare(
      "SELECT count(*), coalesce(sum(kind = 'c'), 0), coalesce(sum(kind = 'p'), 0), coalesce(sum(bytes), 0),"
      " coalesce(sum(tokens), 0), coalesce(sum(hits), 0) FROM entries");
  if (s.step()) {
    st.entries = s.integer(0);
    st.content_entries = s.integer(1);
    st.chain_entries = s.integer(2);
    st.bytes = s.integer(3);
    st.tokens = s.integer(4);
    st.hits = s.integer(5);
  }
  return st;
}

CacheDirVerify CacheDir::verify() {
  std::lock_guard<std::recursive_mutex> g(mu_);
  CacheDirVerify v;
  for (const CacheDirEntry& e : list()) {
    ++v.checked;
    std::optional<std::string> r = read_whole(entry_path(e.id));
    std::string why;
    if (!r) why = "its file is missing";
    else if (static_cast<int64_t>(r->size()) != e.bytes) why = "its size does not match the index";
    else if (r->size() < 8 || entry_checksum(std::string_view(*r).substr(0, r->size() - 8)) != e.checksum)
      why = "its checksum does not match the index";
    else {
      try {
        const EntryRecordInfo info = inspect_entry(*r, entry_path(e.id));
        if (info.kind != e.id[0]) why = "its record is of another kind than its id";
      } catch (const FormatError& err) {
        why = err.what();
      }
    }
    if (why.empty()) {
      ++v.intact;
      continue;
    }
    ++v.dropped;
    v.problems.push_back(e.id + ": " + why);
    drop(e.id, why);
  }
  return v;
}

int64_t CacheDir::clear() {
  std::lock_guard<std::recursive_mutex> g(mu_);
  const std::vector<CacheDirEntry> all = list();
  db_.exec("DELETE FROM entries");
  for (const CacheDirEntry& e : all) {
    std::error_code ec;
    fs::remove(entry_path(e.id), ec);
  }
  return static_cast<int64_t>(all.size());
}

}  // namespace hypic::sdk
