// Bad documents in an ingested folder: each is skipped with a warning naming it, the rest is ingested,
// and nothing that could poison later searches reaches the database.
#include "sdk/document_ingester.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>

#include "runtime/error.h"
#include "temp_dir.h"

using namespace hypic::sdk;
using hypic::sdk::test::TempDir;

namespace {

bool has_warning(const IngestReport& r, const std::string& needle) {
  for (const auto& w : r.warnings)
    if (w.find(needle) != std::string::npos) return true;
  return false;
}

TEST(DocumentIngester, BadEntriesAreSkippedWithAWarningNamingThem) {
  TempDir dir;
  const auto docs = dir.path / "docs";
  std::filesystem::create_directories(docs / "sub");
  std::ofstream(docs / "good.txt") << "Alpha document about seams.";
  std::ofstream(docs / "sub" / "also_good.md") << "Beta document, caf\xC3\xA9.";
  std::ofstream(docs / "overlong.txt") << "slash \xC0\xAF overlong";            // U+002F in two bytes
  std::ofstream(docs / "surrogate.txt") << "half \xED\xA0\x80 of a pair";       // U+D800
  std::ofstream(docs / "above.txt") << "beyond \xF4\x90\x80\x80 U+10FFFF";       // U+110000
  std::ofstream(docs / "truncated.txt") << "cut \xE2\x82";
  std::ofstream(docs / "nul.txt") << std::string("nul \0 byte", 10);
  std::filesystem::create_symlink("loop.txt", docs / "loop.txt");               // refers to itself
  std::filesystem::create_symlink("missing.txt", docs / "dangling.txt");
  ASSERT_EQ(mkfifo((docs / "pipe.txt").c_str(), 0600), 0);                       // not a regular file: ignored

  FtsRetriever r = FtsRetriever::open(dir.file("r.db"));
  const IngestReport rep = ingest_directory(r, docs.string(), IngestOptions{});
  EXPECT_EQ(rep.documents_added, 2u);
  EXPECT_EQ(r.documents(), (std::vector<std::string>{"good.txt", "sub/also_good.md"}));
  EXPECT_TRUE(has_warning(rep, "overlong.txt: not valid UTF-8 at byte 6; skipped"));
  EXPECT_TRUE(has_warning(rep, "surrogate.txt: not valid UTF-8 at byte 5; skipped"));
  EXPECT_TRUE(has_warning(rep, "above.txt: not valid UTF-8 at byte 7; skipped"));
  EXPECT_TRUE(has_warning(rep, "truncated.txt: not valid UTF-8 at byte 4; skipped"));
  EXPECT_TRUE(has_warning(rep, "nul.txt: holds a NUL byte"));
  EXPECT_TRUE(has_warning(rep, "loop.txt: cannot be resolved ("));
  EXPECT_TRUE(has_warning(rep, "dangling.txt: cannot be resolved (")) << ::testing::PrintToString(rep.warnings);
  EXPECT_EQ(rep.skipped.size(), rep.warnings.size());
  EXPECT_EQ(rep.skipped.size(), 7u) << ::testing::PrintToString(rep.warnings);
  // Searches keep working after the bad files.
  EXPECT_EQ(r.search("alpha", 5).size(), 1u);
  EXPECT_EQ(r.search("café", 5).size(), 1u);
}

TEST(DocumentIngester, TheRetrieverRefusesInvalidUtf8Directly) {
  TempDir dir;
  FtsRetriever r = FtsRetriever::open(dir.file("r.db"));
  try {
    r.add_document("x.txt", "ok \xED\xBF\xBF", 16, nullptr);
    FAIL() << "accepted";
  } catch (const hypic::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("document 'x.txt' is not valid UTF-8 at byte 3"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(r.documents().empty());
}

}  // namespace
