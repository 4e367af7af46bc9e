#include "sdk/fts_retriever.h"

#include <cctype>

#include "runtime/error.h"
#include "runtime/segment_key.h"
#include "runtime/text/utf8.h"

namespace hypic::sdk {
namespace {

constexpr int kSchemaVersion = 1;
constexpr const char* kSchema = R"(
CREATE TABLE documents(
  path TEXT PRIMARY KEY,
  sha256 TEXT NOT NULL,
  chunk_tokens INTEGER NOT NULL,
  counter TEXT NOT NULL);
CREATE TABLE chunks(
  id TEXT PRIMARY KEY,
  doc_path TEXT NOT NULL REFERENCES documents(path),
  idx INTEGER NOT NULL,
  text TEXT NOT NULL,
  tokens INTEGER NOT NULL);
CREATE INDEX chunks_by_doc ON chunks(doc_path, idx);
CREATE VIRTUAL TABLE chunks_fts USING fts5(id UNINDEXED, text, tokenize = 'unicode61 remove_diacritics 2');
)";

}  // namespace

std::string fts_query(const std::string& text) {
  std::string q;
  std::string word;
  auto flush = [&] {
    if (word.empty()) return;
    q += (q.empty() ? "\"" : " OR \"") + word + "\"";
    word.clear();
  };
  for (unsigned char c : text) {
    // Letters, digits and any non-ASCII byte form words (unicode61 tokenizes those the same way).
    if (std::isalnum(c) || c >= 0x80 || c == '_') word.push_back(char(c));
    else flush();
  }
  flush();
  return q;
}

FtsRetriever FtsRetriever::open(const std::string& path) {
  return FtsRetriever(Database::open(path, "retrieval", kSchemaVersion, kSchema));
}

FtsRetriever::AddResult FtsRetriever::add_document(const std::string& doc_path, const std::string& text,
                                                   size_t chunk_tokens, const TokenCounter* counter) {
  // Invalid UTF-8 (overlong forms, surrogates) stored in the index would poison every later search.
  if (const size_t bad = utf8::find_invalid(text); bad != std::string::npos)
    throw InvalidArgument("document '" + utf8::to_valid_lossy(doc_path) + "' is not valid UTF-8 at byte " +
                          std::to_string(bad));
  if (const size_t bad = utf8::find_invalid(doc_path); bad != std::string::npos)
    throw InvalidArgument("document path '" + utf8::to_valid_lossy(doc_path) + "' is not valid UTF-8");
  const std::string digest = sha256_hex(text);
  const std::string counter_id = counter ? counter->id() : "words";
  {
    Statement s = db_.prepare("SELECT sha256, chunk_tokens, counter FROM documents WHERE path = ?");
    s.bind(1, doc_path);
    if (s.step() && s.text(0) == digest && s.integer(1) == int64_t(chunk_tokens) && s.text(2) == counter_id)
      return {false, 0};
  }
  const std::vector<TextChunk> pieces = split_into_chunks(text, chunk_tokens, counter);
  Transaction tx(db_);
  remove_document(doc_path);
  db_.prepare("INSERT INTO documents VALUES(?, ?, ?, ?)")
      .bind(1, doc_path)
      .bind(2, digest)
      .bind(3, int64_t(chunk_tokens))
      .bind(4, counter_id)
      .run();
  Statement ins = db_.prepare("INSERT OR IGNORE INTO chunks VALUES(?, ?, ?, ?, ?)");
  Statement fts = db_.prepare("INSERT INTO chunks_fts(id, text) VALUES(?, ?)");
  size_t added = 0;
  for (size_t i = 0; i < pieces.size(); ++i) {
    const std::string id = chunk_id(doc_path, pieces[i].text);
    ins.reset();
    ins.bind(1, id).bind(2, doc_path).bind(3, int64_t(i)).bind(4, pieces[i].text).bind(5, int64_t(pieces[i].tokens)).run();
    if (db_.changes() == 0) continue;  // the same text twice in one document is one chunk
    fts.reset();
    fts.bind(1, id).bind(2, pieces[i].text).run();
    ++added;
  }
  tx.commit();
  return {true, added};
}

bool FtsRetriever::remove_document(const std::string& doc_path) {
  db_.prepare("DELETE FROM chunks_fts WHERE id IN (SELECT id FROM chunks WHERE doc_path = ?)").bind(1, doc_path).run();
  db_.prepare("DELETE FROM chunks WHERE doc_path = ?").bind(1, doc_path).run();
  db_.prepare("DELETE FROM documents WHERE path = ?").bind(1, doc_path).run();
  return db_.changes() > 0;
}

std::vector<std::string> FtsRetriever::documents() const {
  std::vector<std::string> out;
  Statement s = db_.prepare("SELECT path FROM documents ORDER BY path");
  while (s.step()) out.push_back(s.text(0));
  return out;
}

std::vector<Chunk> FtsRetriever::search(const std::string& query, size_t k) const {
  const std::string q = fts_query(query);
  std::vector<Chunk> out;
  if (q.empty() || k == 0) return out;
  // bm25() is lower-is-better; ties break on the id so results are deterministic.
  Statement s = db_.prepare(
      "SELECT c.id, c.doc_path, c.idx, c.text, -bm25(chunks_fts) AS score FROM chunks_fts "
      "JOIN chunks c ON c.id = chunks_fts.id WHERE chunks_fts MATCH ? ORDER BY bm25(chunks_fts), c.id LIMIT ?");
  s.bind(1, q).bind(2, int64_t(k));
  while (s.step()) out.push_back(Chunk{s.text(0), s.text(1), s.integer(2), s.text(3), s.real(4)});
  return out;
}

std::optional<Chunk> FtsRetriever::chunk(const std::string& id) const {
  Statement s = db_.prepare("SELECT id, doc_path, idx, text FROM chunks WHERE id = ?");
  s.bind(1, id);
  if (!s.step()) return std::nullopt;
  return Chunk{s.text(0), s.text(1), s.integer(2), s.text(3), 0};
}

size_t FtsRetriever::chunk_count() const {
  Statement s = db_.prepare("SELECT count(*) FROM chunks");
  s.step();
  return size_t(s.integer(0));
}

}  // namespace hypic::sdk
