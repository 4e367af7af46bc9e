// The embedded default Retriever: chunks in an SQLite FTS5 table, ranked by BM25.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "sdk/chunker.h"
#include "sdk/retriever.h"
#include "sdk/sqlite_db.h"

namespace hypic::sdk {

class FtsRetriever : public Retriever {
 public:
  // Opens or creates a retrieval database. FormatError (file untouched) for a non-hypic or damaged file.
  static FtsRetriever open(const std::string& path);

  struct AddResult {
    bool changed = false;  // false: same content as stored, nothing written
    size_t chunks = 0;
  };
  // Stores (or replaces) document `doc_path` split into chunks of at most `chunk_tokens` tokens.
  // One transaction: a document is either fully replaced or untouched.
  AddResult add_document(const std::string& doc_path, const std::string& text, size_t chunk_tokens,
                         const TokenCounter* counter);
  // Removes a document and its chunks; false when it was not stored.
  bool remove_document(const std::string& doc_path);
  std::vector<std::string> documents() const;

  std::vector<Chunk> search(const std::string& query, size_t k) const override;
  std::optional<Chunk> chunk(const std::string& id) const;
  size_t chunk_count() const;

  const std::string& path() const { return db_.path(); }

 private:
  explicit FtsRetriever(Database db) : db_(std::move(db)) {}
  Database db_;
};

// FTS5 query text for free text: every word quoted (so punctuation and FTS operators in user text are
// literal), joined with OR so that BM25 ranks partial matches. Empty when the text has no words.
std::string fts_query(const std::string& text);

}  // namespace hypic::sdk
