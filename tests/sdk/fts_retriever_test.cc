#include "sdk/fts_retriever.h"

#include <gtest/gtest.h>

#include <fstream>

#include "runtime/error.h"
#include "sdk/document_ingester.h"
#include "temp_dir.h"

using namespace hypic::sdk;
using hypic::sdk::test::TempDir;

namespace {

// Counts characters: a stand-in tokenizer with a different rule than words.
class CharCounter : public TokenCounter {
 public:
  size_t count(std::string_view t) const override { return t.size(); }
  std::string id() const override { return "chars"; }
};

TEST(Chunker, RespectsTheBoundAndPrefersParagraphs) {
  const std::string text = "one two three\n\nfour five six seven\n\n  \n\neight nine ten eleven twelve thirteen fourteen";
  const auto chunks = split_into_chunks(text, 5, nullptr);
  ASSERT_EQ(chunks.size(), 4u);
  EXPECT_EQ(chunks[0].text, "one two three");  // a second paragraph would exceed 5 words
  EXPECT_EQ(chunks[1].text, "four five six seven");
  EXPECT_EQ(chunks[2].text, "eight nine ten eleven twelve");  // an oversized paragraph splits by words
  EXPECT_EQ(chunks[3].text, "thirteen fourteen");
  for (const auto& c : chunks) EXPECT_LE(c.tokens, 5u);
  const auto joined = split_into_chunks(text, 100, nullptr);
  ASSERT_EQ(joined.size(), 1u);
  EXPECT_EQ(joined[0].text, "one two three\n\nfour five six seven\n\neight nine ten eleven twelve thirteen fourteen");
  EXPECT_THROW(split_into_chunks(text, 0, nullptr), hypic::InvalidArgument);
}

TEST(Chunker, UsesTheTokenCounterAndCutsOversizedWords) {
  CharCounter chars;
  const auto chunks = split_into_chunks("abcdefghij xy", 4, &chars);
  std::vector<std::string> texts;
  for (const auto& c : chunks) {
    texts.push_back(c.text);
    EXPECT_LE(c.tokens, 4u);
  }
  EXPECT_EQ(texts, (std::vector<std::string>{"abcd", "efgh", "ij", "xy"}));
  // Never cuts inside a UTF-8 character.
  for (const auto& c : split_into_chunks("\xC3\xA9\xC3\xA9\xC3\xA9", 3, &chars)) EXPECT_EQ(c.text, "\xC3\xA9");
}

TEST(Chunker, IdsAreStable) {
  EXPECT_EQ(chunk_id("a.txt", "hello"), chunk_id("a.txt", "hello"));
  EXPECT_NE(chunk_id("a.txt", "hello"), chunk_id("b.txt", "hello"));
  EXPECT_NE(chunk_id("a.txt", "hello"), chunk_id("a.txt", "hello!"));
  EXPECT_EQ(chunk_id("a.txt", "hello").size(), 16u);
}

TEST(FtsRetriever, RanksByBm25AndReturnsStableChunks) {
  TempDir dir;
  FtsRetriever r = FtsRetriever::open(dir.file("r.db"));
  r.add_document("keys.txt", "A chain key names a block after one exact prefix.\n\nUnrelated gardening advice.", 12, nullptr);
  r.add_document("other.txt", "Keys and locks. A key opens a door.", 50, nullptr);
  EXPECT_EQ(r.chunk_count(), 3u);
  const auto hits = r.search("what is a chain key?", 3);
  ASSERT_GE(hits.size(), 2u);
  EXPECT_EQ(hits[0].doc_path, "keys.txt");
  EXPECT_EQ(hits[0].text, "A chain key names a block after one exact prefix.");
  EXPECT_EQ(hits[0].id, chunk_id("keys.txt", hits[0].text));
  EXPECT_GT(hits[0].score, hits[1].score);
  EXPECT_EQ(r.chunk(hits[0].id)->text, hits[0].text);
  // FTS syntax in user text is literal, not an error.
  EXPECT_NO_THROW(r.search("NEAR( \"key* OR AND -:", 2));
  EXPECT_TRUE(r.search("!!!", 2).empty());
  EXPECT_TRUE(r.search("zebra", 2).empty());
  EXPECT_EQ(r.search("key", 1).size(), 1u);
}

TEST(FtsRetriever, ReingestKeepsIdsAndReplacesChangedDocuments) {
  TempDir dir;
  const auto docs = dir.path / "docs";
  std::filesystem::create_directories(docs / "sub");
  std::ofstream(docs / "a.txt") << "Alpha paragraph one.\n\nAlpha paragraph two.";
  std::ofstream(docs / "sub" / "b.md") << "Beta document about seams.";
  std::ofstream(docs / "image.png") << "\x89PNG";
  std::ofstream(docs / "bad.txt") << "not utf8 \xFF\xFE";
  const std::string db = dir.file("r.db");
  IngestOptions opt;
  opt.chunk_tokens = 3;
  std::vector<std::string> ids_before;
  {
    FtsRetriever r = FtsRetriever::open(db);
    const auto rep = ingest_directory(r, docs.string(), opt);
    EXPECT_EQ(rep.documents_added, 2u);
    EXPECT_EQ(rep.skipped, std::vector<std::string>{"bad.txt"});
    EXPECT_EQ(r.documents(), (std::vector<std::string>{"a.txt", "sub/b.md"}));
    for (const auto& c : r.search("alpha beta", 10)) ids_before.push_back(c.id);
  }
  FtsRetriever r = FtsRetriever::open(db);
  // The progress callback sees every document with its position, before it is read.
  std::vector<std::string> seen;
  opt.on_document = [&](size_t i, size_t n, const std::string& path) {
    EXPECT_EQ(i, seen.size());
    EXPECT_EQ(n, 3u);
    seen.push_back(path);
  };
  const auto again = ingest_directory(r, docs.string(), opt);
  EXPECT_EQ(seen, (std::vector<std::string>{"a.txt", "bad.txt", "sub/b.md"}));
  opt.on_document = nullptr;
  EXPECT_EQ(again.documents_added, 0u);
  EXPECT_EQ(again.documents_unchanged, 2u);
  std::vector<std::string> ids_after;
  for (const auto& c : r.search("alpha beta", 10)) ids_after.push_back(c.id);
  EXPECT_EQ(ids_after, ids_before);
  // A changed document replaces its chunks; an unchanged chunk keeps its id.
  std::ofstream(docs / "a.txt", std::ios::trunc) << "Alpha paragraph one.\n\nGamma replaced text.";
  const auto changed = ingest_directory(r, docs.string(), opt);
  EXPECT_EQ(changed.documents_added, 1u);
  EXPECT_TRUE(r.search("two", 5).empty());
  EXPECT_TRUE(r.chunk(chunk_id("a.txt", "Alpha paragraph one.")).has_value());
  // Another token counter rechunks.
  CharCounter chars;
  opt.counter = &chars;
  opt.chunk_tokens = 30;
  EXPECT_EQ(ingest_directory(r, docs.string(), opt).documents_added, 2u);
  EXPECT_THROW(ingest_directory(r, (dir.path / "missing").string(), opt), hypic::IoError);
}

TEST(FtsRetriever, ChunksBecomeATemplateVariable) {
  const auto j = chunks_to_json({Chunk{"id1", "a.txt", 2, "text", 1.5}});
  EXPECT_EQ(j.dump(), R"([{"id":"id1","path":"a.txt","index":2,"text":"text","score":1.5}])");
}

TEST(FtsRetriever, RefusesAHistoryDatabase) {
  TempDir dir;
  { hypic::sdk::Database::open(dir.file("h.db"), "history", 1, "CREATE TABLE x(y);"); }
  try {
    FtsRetriever::open(dir.file("h.db"));
    FAIL();
  } catch (const hypic::FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("a hypic 'history' database, not a 'retrieval' database"), std::string::npos);
  }
}

}  // namespace
