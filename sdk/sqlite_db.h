// A thin RAII layer over the sqlite3 C API for hypic's own database files (history, retrieval).
// Every error names the file. A file that is not SQLite, is corrupt, or belongs to something else is
// refused before anything is written to it.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

struct sqlite3;
struct sqlite3_stmt;

namespace hypic::sdk {

class Statement {
 public:
  Statement(sqlite3* db, const std::string& path, std::string_view sql);
  Statement(Statement&&) noexcept;
  Statement& operator=(Statement&&) = delete;
  ~Statement();

  Statement& bind(int index, std::string_view text);  // 1-based
  Statement& bind(int index, int64_t value);
  Statement& bind(int index, double value);
  Statement& bind_null(int index);
  bool step();  // true while a row is available
  void run();   // step to completion
  void reset();

  std::string text(int col) const;  // 0-based; "" for NULL
  int64_t integer(int col) const;
  double real(int col) const;
  bool is_null(int col) const;

 private:
  sqlite3* db_;
  const std::string* path_;
  sqlite3_stmt* stmt_ = nullptr;
};

class Database {
 public:
  // Opens `path` for a hypic file of kind `kind` ("history", "retrieval") at schema `version`, creating
  // it (and running `schema`) when the file is missing or empty. Throws IoError when the file cannot be
  // opened, FormatError when it is not SQLite, corrupt, not hypic's, of another kind or another version.
  static Database open(const std::string& path, const std::string& kind, int version, const std::string& schema);

  Database(Database&&) noexcept;
  Database& operator=(Database&&) noexcept;
  ~Database();

  void exec(std::string_view sql);
  Statement prepare(std::string_view sql) const;
  int64_t changes() const;  // rows changed by the last statement
  const std::string& path() const { return *path_; }
  sqlite3* handle() const { return db_; }

 private:
  Database(sqlite3* db, std::string path);
  sqlite3* db_ = nullptr;
  std::unique_ptr<std::string> path_;  // stable address for statements' messages
};

// BEGIN IMMEDIATE ... COMMIT; rolls back when destroyed uncommitted (an exception or an early return).
class Transaction {
 public:
  explicit Transaction(Database& db);
  Transaction(const Transaction&) = delete;
  Transaction& operator=(const Transaction&) = delete;
  ~Transaction();
  void commit();

 private:
  Database* db_;
  bool done_ = false;
};

}  // namespace hypic::sdk
