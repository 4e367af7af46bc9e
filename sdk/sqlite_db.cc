#include "sdk/sqlite_db.h"

#include <chrono>
#include <thread>

#include <sqlite3.h>

#include <filesystem>

#include "runtime/error.h"

namespace hypic::sdk {
namespace {

// 'HYPC': marks the file as hypic's in the SQLite header (PRAGMA application_id).
constexpr int64_t kApplicationId = 0x48595043;

[[noreturn]] void fail(sqlite3* db, const std::string& path, const std::string& what) {
  const int code = db ? sqlite3_errcode(db) : SQLITE_ERROR;
  const std::string msg = db ? sqlite3_errmsg(db) : "out of memory";
  const std::string text = path + ": " + what + ": " + msg;
  if (code == SQLITE_NOTADB || code == SQLITE_CORRUPT) throw FormatError(text + " (not a valid hypic database file)");
  throw IoError(text);
}

}  // namespace

Statement::Statement(sqlite3* db, const std::string& path, std::string_view sql) : db_(db), path_(&path) {
  if (sqlite3_prepare_v2(db, sql.data(), int(sql.size()), &stmt_, nullptr) != SQLITE_OK)
    fail(db, path, "cannot prepare '" + std::string(sql.substr(0, 60)) + "'");
}

Statement::Statement(Statement&& o) noexcept : db_(o.db_), path_(o.path_), stmt_(o.stmt_) { o.stmt_ = nullptr; }

Statement::~Statement() {
  if (stmt_) sqlite3_finalize(stmt_);
}

Statement& Statement::bind(int i, std::string_view text) {
  if (sqlite3_bind_text(stmt_, i, text.data(), int(text.size()), SQLITE_TRANSIENT) != SQLITE_OK) fail(db_, *path_, "bind");
  return *this;
}
Statement& Statement::bind(int i, int64_t v) {
  if (sqlite3_bind_int64(stmt_, i, v) != SQLITE_OK) fail(db_, *path_, "bind");
  return *this;
}
Statement& Statement::bind(int i, double v) {
  if (sqlite3_bind_double(stmt_, i, v) != SQLITE_OK) fail(db_, *path_, "bind");
  return *this;
}
Statement& Statement::bind_null(int i) {
  if (sqlite3_bind_null(stmt_, i) != SQLITE_OK) fail(db_, *path_, "bind");
  return *this;
}

bool Statement::step() {
  const int rc = sqlite3_step(stmt_);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  fail(db_, *path_, "query failed");
}

void Statement::run() {
  while (step()) {
  }
}

void Statement::reset() {
  sqlite3_reset(stmt_);
  sqlite3_clear_bindings(stmt_);
}

std::string Statement::text(int col) const {
  const auto* p = reinterpret_cast<const char*>(sqlite3_column_text(stmt_, col));
  return p ? std::string(p, size_t(sqlite3_column_bytes(stmt_, col))) : std::string();
}
int64_t Statement::integer(int col) const { return sqlite3_column_int64(stmt_, col); }
double Statement::real(int col) const { return sqlite3_column_double(stmt_, col); }
bool Statement::is_null(int col) const { return sqlite3_column_type(stmt_, col) == SQLITE_NULL; }

Database::Database(sqlite3* db, std::string path) : db_(db), path_(std::make_unique<std::string>(std::move(path))) {}

Database::Database(Database&& o) noexcept : db_(o.db_), path_(std::move(o.path_)) { o.db_ = nullptr; }

Database& Database::operator=(Database&& o) noexcept {
  if (this != &o) {
    if (db_) sqlite3_close_v2(db_);
    db_ = o.db_;
    path_ = std::move(o.path_);
    o.db_ = nullptr;
  }
  return *this;
}

Database::~Database() {
  if (db_) sqlite3_close_v2(db_);
}

void Database::exec(std::string_view sql) {
  char* err = nullptr;
  if (sqlite3_exec(db_, std::string(sql).c_str(), nullptr, nullptr, &err) != SQLITE_OK) {
    const std::string msg = err ? err : "?";
    sqlite3_free(err);
    fail(db_, *path_, "'" + std::string(sql.substr(0, 60)) + "' failed (" + msg + ")");
  }
}

int64_t Database::changes() const { return sqlite3_changes64(db_); }

Statement Database::prepare(std::string_view sql) const { return Statement(db_, *path_, sql); }

namespace {

bool is_empty(const Database& db) {
  int64_t app_id = 0, tables = 0;
  {
    Statement s = db.prepare("PRAGMA application_id");
    if (s.step()) app_id = s.integer(0);
  }
  {
    Statement s = db.prepare("SELECT count(*) FROM sqlite_master");
    if (s.step()) tables = s.integer(0);
  }
  return app_id == 0 && tables == 0;
}

// Throws FormatError unless the file is a hypic database of this kind and schema version.
void verify_ours(const Database& db, const std::string& path, const std::string& kind, int version) {
  Statement a = db.prepare("PRAGMA application_id");
  if (!a.step() || a.integer(0) != kApplicationId)
    throw FormatError(path + ": not a hypic database (it is an SQLite file of another application)");
  std::string file_kind;
  int64_t file_version = -1;
  Statement s = db.prepare("SELECT key, value FROM hypic_meta");
  while (s.step()) {
    if (s.text(0) == "kind") file_kind = s.text(1);
    if (s.text(0) == "version") {
      const std::string v = s.text(1);
      file_version = !v.empty() && v.size() < 10 && v.find_first_not_of("0123456789") == std::string::npos
                         ? std::stoll(v)
                         : -1;
    }
  }
  if (file_kind != kind)
    throw FormatError(path + ": a hypic '" + file_kind + "' database, not a '" + kind + "' database");
  if (file_version != version)
    throw FormatError(path + ": " + kind + " database schema version " + std::to_string(file_version) +
                      ", this build reads version " + std::to_string(version));
}

// Switching a file to WAL needs an exclusive lock and SQLite reports a conflict at once (no busy
// handler), which happens when several processes open a new file together: retry for up to 10 s.
void set_pragmas(Database& db) {
  static const char* kPragmas = "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL; PRAGMA foreign_keys=ON;";
  for (int attempt = 0;; ++attempt) {
    char* err = nullptr;
    const int rc = sqlite3_exec(db.handle(), kPragmas, nullptr, nullptr, &err);
    sqlite3_free(err);
    if (rc != SQLITE_BUSY && rc != SQLITE_LOCKED) break;
    if (attempt == 400) break;  // let exec() below report it
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
  db.exec(kPragmas);
}

}  // namespace

Database Database::open(const std::string& path, const std::string& kind, int version, const std::string& schema) {
  std::error_code ec;
  const bool fresh_file = !std::filesystem::exists(path, ec) || std::filesystem::file_size(path, ec) == 0;
  sqlite3* raw = nullptr;
  const int rc = sqlite3_open_v2(path.c_str(), &raw, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX,
                                 nullptr);
  Database db(raw, path);
  if (rc != SQLITE_OK) fail(raw, path, "cannot open database");
  sqlite3_extended_result_codes(raw, 0);
  sqlite3_busy_timeout(raw, 5000);

  // Read-only checks first: a foreign or damaged file must be left exactly as it was.
  if (!fresh_file && !is_empty(db)) {
    verify_ours(db, path, kind, version);
    // Only now, with the file known to be ours, do settings that may write to it.
    set_pragmas(db);
    return db;
  }
  set_pragmas(db);
  Transaction t(db);
  // Several processes may create one new file at once: emptiness is decided again under the write lock,
  // and whoever comes second finds the first one's schema and checks it instead of creating it again.
  if (!is_empty(db)) {
    t.commit();
    verify_ours(db, path, kind, version);
    return db;
  }
  db.exec("PRAGMA application_id=" + std::to_string(kApplicationId));
  db.exec("CREATE TABLE hypic_meta(key TEXT PRIMARY KEY, value TEXT NOT NULL)");
  db.prepare("INSERT INTO hypic_meta VALUES('kind', ?)").bind(1, kind).run();
  db.prepare("INSERT INTO hypic_meta VALUES('version', ?)").bind(1, std::to_string(version)).run();
  db.exec(schema);
  t.commit();
  return db;
}

Transaction::Transaction(Database& db) : db_(&db) { db_->exec("BEGIN IMMEDIATE"); }

Transaction::~Transaction() {
  if (!done_) sqlite3_exec(db_->handle(), "ROLLBACK", nullptr, nullptr, nullptr);
}

void Transaction::commit() {
  db_->exec("COMMIT");
  done_ = true;
}

}  // namespace hypic::sdk
