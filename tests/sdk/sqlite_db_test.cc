// The files hypic writes (history and retrieval databases) under concurrent creation and under
// SIGKILL at random points: afterwards every file opens, passes SQLite's integrity check, and holds
// exactly the committed work, each unit whole.
#include "sdk/sqlite_db.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <thread>

#include "sdk/document_ingester.h"
#include "sdk/fts_retriever.h"
#include "sdk/history_store.h"
#include "temp_dir.h"

using namespace hypic::sdk;
using hypic::sdk::test::TempDir;

namespace {

HistoryMessage msg(const std::string& role, const std::string& content) {
  HistoryMessage m;
  m.role = role;
  m.content = content;
  return m;
}

// SQLite's own verdict on the file ("ok" when every page, index and the FTS tables are consistent).
std::string integrity(const std::string& path) {
  sqlite3* db = nullptr;
  std::string r = "cannot open";
  if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE, nullptr) == SQLITE_OK) {
    sqlite3_stmt* st = nullptr;
    if (sqlite3_prepare_v2(db, "PRAGMA integrity_check", -1, &st, nullptr) == SQLITE_OK &&
        sqlite3_step(st) == SQLITE_ROW)
      r = reinterpret_cast<const char*>(sqlite3_column_text(st, 0));
    sqlite3_finalize(st);
  }
  sqlite3_close(db);
  return r;
}

// The distinct "roundN" words of a text.
std::set<std::string> rounds_in(const std::string& text) {
  std::set<std::string> out;
  for (size_t p = text.find("round"); p != std::string::npos; p = text.find("round", p + 1)) {
    size_t e = p + 5;
    while (e < text.size() && std::isdigit(static_cast<unsigned char>(text[e]))) ++e;
    if (e > p + 5) out.insert(text.substr(p, e - p));
  }
  return out;
}

// Forks `n` children that wait for one byte on a pipe, then run `body`; returns their exit codes.
template <class F>
std::vector<int> run_together(int n, F body) {
  int go[2];
  if (pipe(go) != 0) return {};
  std::vector<pid_t> kids;
  for (int i = 0; i < n; ++i) {
    const pid_t pid = fork();
    if (pid == 0) {
      close(go[1]);
      char c;
      if (read(go[0], &c, 1) < 0) _exit(4);
      _exit(body(i));
    }
    kids.push_back(pid);
  }
  close(go[0]);
  const std::string bytes(n, 'g');
  if (write(go[1], bytes.data(), bytes.size()) != n) return {};
  close(go[1]);
  std::vector<int> codes;
  for (pid_t k : kids) {
    int status = 0;
    waitpid(k, &status, 0);
    codes.push_back(WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
  }
  return codes;
}

TEST(SqliteDb, ThreeProcessesCreatingOneNewDatabaseAllSucceed) {
  for (int round = 0; round < 8; ++round) {
    TempDir dir;
    const std::string db = dir.file("h.db");
    const auto codes = run_together(3, [&](int i) {
      try {
        HistoryStore h = HistoryStore::open(db);
        h.create_session("s" + std::to_string(i));
        return 0;
      } catch (const std::exception& e) {
        std::fprintf(stderr, "process %d: %s\n", i, e.what());
        return 1;
      }
    });
    EXPECT_EQ(codes, (std::vector<int>{0, 0, 0})) << "round " << round;
    HistoryStore h = HistoryStore::open(db);
    EXPECT_EQ(h.sessions().size(), 3u);
    EXPECT_EQ(integrity(db), "ok");
  }
}

// Kills `child` after a random delay in [lo, hi) milliseconds.
void kill_after(pid_t child, std::mt19937& rng, int lo, int hi) {
  std::this_thread::sleep_for(std::chrono::milliseconds(std::uniform_int_distribution<int>(lo, hi - 1)(rng)));
  kill(child, SIGKILL);
  int status = 0;
  waitpid(child, &status, 0);
}

std::mt19937 seeded(const char* what) {
  const unsigned seed = std::random_device{}();
  std::printf("%s: seed %u\n", what, seed);
  return std::mt19937(seed);
}

TEST(CrashSafety, HistoryDatabaseSurvivesSigkillAtRandomPoints) {
  TempDir dir;
  const std::string db = dir.file("h.db");
  std::mt19937 rng = seeded("history");
  int64_t seen = 0;
  bool created = false;
  for (int round = 0; round < 12; ++round) {
    const pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      // From the first round on this includes creating the file; then endless appends.
      HistoryStore h = HistoryStore::open(db);
      if (!h.has_session("s")) h.create_session("s");
      for (int64_t t = static_cast<int64_t>(h.turns("s").size());; ++t)
        h.append_turn("s", {msg("user", "q" + std::to_string(t)), msg("assistant", std::string(3000 + t % 500, 'a'))});
    }
    kill_after(child, rng, 1, 80);
    // Killed before the first open created the file: nothing was stored (a 1 ms kill lands there at times).
    if (!std::filesystem::exists(db)) {
      ASSERT_FALSE(created) << "round " << round << ": the database vanished";
      continue;
    }
    created = true;
    ASSERT_EQ(integrity(db), "ok") << "round " << round;
    HistoryStore h = HistoryStore::open(db);
    if (!h.has_session("s")) continue;  // killed before the session was committed
    const auto turns = h.turns("s");
    ASSERT_GE(static_cast<int64_t>(turns.size()), seen) << "a committed turn was lost";
    for (size_t t = 0; t < turns.size(); ++t) {
      ASSERT_EQ(turns[t].index, static_cast<int64_t>(t));
      ASSERT_EQ(turns[t].messages.size(), 2u) << "turn " << t << " is partial";
      EXPECT_EQ(turns[t].messages[0].content, "q" + std::to_string(t));
      EXPECT_EQ(turns[t].messages[1].content, std::string(3000 + t % 500, 'a'));
    }
    seen = static_cast<int64_t>(turns.size());
  }
  EXPECT_GT(seen, 0);
}

TEST(CrashSafety, RetrievalDatabaseSurvivesSigkillAtRandomPoints) {
  TempDir dir;
  const std::string db = dir.file("r.db");
  const auto docs = dir.path / "docs";
  std::filesystem::create_directories(docs);
  std::mt19937 rng = seeded("retrieval");
  for (int round = 0; round < 12; ++round) {
    // Every round changes every document, so the killed ingest is replacing chunks.
    for (int d = 0; d < 20; ++d) {
      std::ofstream out(docs / ("d" + std::to_string(d) + ".txt"));
      for (int p = 0; p < 40; ++p) out << "round" << round << " doc" << d << " paragraph " << p << " words words\n\n";
    }
    const pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      FtsRetriever r = FtsRetriever::open(db);
      IngestOptions opt;
      opt.chunk_tokens = 8;
      ingest_directory(r, docs.string(), opt);
      _exit(0);
    }
    kill_after(child, rng, 1, 120);
    ASSERT_EQ(integrity(db), "ok") << "round " << round;
    FtsRetriever r = FtsRetriever::open(db);
    // Each stored document is whole: either this round's text or an earlier round's, never a mix.
    const auto hits = r.search("paragraph", 100000);
    for (const auto& doc : r.documents()) {
      std::set<std::string> rounds;
      for (const auto& c : hits)
        if (c.doc_path == doc)
          for (const auto& w : rounds_in(c.text)) rounds.insert(w);
      EXPECT_EQ(rounds.size(), 1u) << doc << " mixes rounds after round " << round;
    }
    // Ingesting again converges to exactly the current folder.
    IngestOptions opt;
    opt.chunk_tokens = 8;
    ingest_directory(r, docs.string(), opt);
    EXPECT_EQ(r.documents().size(), 20u);
    EXPECT_EQ(r.search("round" + std::to_string(round), 100000).size(), r.chunk_count());
  }
}

}  // namespace
