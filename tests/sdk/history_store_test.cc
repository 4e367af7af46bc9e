#include "sdk/history_store.h"

#include <gtest/gtest.h>
#include <sqlite3.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

#include "runtime/error.h"
#include "temp_dir.h"

using namespace hypic::sdk;
using hypic::sdk::test::TempDir;

namespace {

std::string read_bytes(const std::string& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

HistoryMessage msg(const std::string& role, const std::string& content) {
  HistoryMessage m;
  m.role = role;
  m.content = content;
  return m;
}

TEST(HistoryStore, RoundTripsMessagesToolCallsAndBlocks) {
  TempDir dir;
  const std::string db = dir.file("h.db");
  std::string sid;
  {
    HistoryStore h = HistoryStore::open(db);
    sid = h.create_session("s1", Json{{"template", "rag_qa"}});
    HistoryMessage call = msg("assistant", "");
    call.tool_calls = Json::parse(R"([{"id": "c1", "type": "function", "function": {"name": "calc", "arguments": "{\"x\": 1}"}}])");
    call.blocks = {{"history.1", "00112233445566778899aabbccddeeff", "ffeeddccbbaa99887766554433221100"}};
    HistoryMessage result = msg("tool", "6");
    result.tool_call_id = "c1";
    result.name = "calc";
    EXPECT_EQ(h.append_turn(sid, {msg("user", "2*3?"), call, result}), 0);
    EXPECT_EQ(h.append_turn(sid, {msg("user", "thanks"), msg("assistant", "you're welcome")}), 1);
    h.set_blocks(sid, 1, 1, {{"history.4", "", ""}});
    EXPECT_THROW(h.set_blocks(sid, 7, 0, {}), hypic::InvalidArgument);
  }
  // A new process would see the same: reopen from disk.
  HistoryStore h = HistoryStore::open(db);
  EXPECT_EQ(h.sessions(), std::vector<std::string>{"s1"});
  EXPECT_EQ(h.session_metadata("s1")["template"], "rag_qa");
  const auto turns = h.turns("s1");
  ASSERT_EQ(turns.size(), 2u);
  ASSERT_EQ(turns[0].messages.size(), 3u);
  EXPECT_EQ(turns[0].messages[1].tool_calls[0]["function"]["name"], "calc");
  EXPECT_EQ(turns[0].messages[1].blocks[0].content_key, "00112233445566778899aabbccddeeff");
  EXPECT_EQ(turns[0].messages[2].tool_call_id, "c1");
  EXPECT_EQ(turns[1].messages[1].blocks[0].block_id, "history.4");
  const Json var = h.history_variable("s1");
  ASSERT_EQ(var.size(), 5u);
  EXPECT_EQ(var[2], Json({{"role", "tool"}, {"content", "6"}, {"tool_call_id", "c1"}, {"name", "calc"}}));
  EXPECT_THROW(h.append_turn("nope", {msg("user", "x")}), hypic::InvalidArgument);
  EXPECT_THROW(h.append_turn("s1", {msg("robot", "x")}), hypic::InvalidArgument);
  EXPECT_THROW(h.create_session("s1"), hypic::InvalidArgument);
  EXPECT_EQ(h.turns("s1").size(), 2u);  // the rejected appends left nothing behind
  EXPECT_EQ(h.create_session().size(), 16u);
}

TEST(HistoryStore, UncommittedTurnLeavesNoTrace) {
  TempDir dir;
  HistoryStore h = HistoryStore::open(dir.file("h.db"));
  h.create_session("s");
  {
    auto w = h.begin_turn("s");
    w.add(msg("user", "half"));
  }
  EXPECT_TRUE(h.turns("s").empty());
  auto w = h.begin_turn("s");
  w.add(msg("user", "whole"));
  EXPECT_EQ(w.commit(), 0);
  EXPECT_EQ(h.messages("s").at(0).content, "whole");
}

// The child commits turns, then is SIGKILLed in the middle of writing one; the parent reopens the file
// and finds every committed turn complete and no trace of the interrupted one.
TEST(HistoryStore, SigkillMidTurnLosesNoCommittedTurn) {
  TempDir dir;
  const std::string db = dir.file("h.db");
  HistoryStore::open(db).create_session("s");
  int pipefd[2];
  ASSERT_EQ(pipe(pipefd), 0);
  constexpr int kCommitted = 5;
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    close(pipefd[0]);
    HistoryStore h = HistoryStore::open(db);
    for (int t = 0; t < kCommitted; ++t)
      h.append_turn("s", {msg("user", "q" + std::to_string(t)), msg("assistant", std::string(20000, 'a' + t))});
    auto w = h.begin_turn("s");
    for (int i = 0; i < 50; ++i) w.add(msg("tool", std::string(10000, 'x')));  // spills into the WAL
    const char ready = 'r';
    if (write(pipefd[1], &ready, 1) != 1) _exit(3);
    pause();  // killed here, mid-turn
    _exit(0);
  }
  close(pipefd[1]);
  char c = 0;
  ASSERT_EQ(read(pipefd[0], &c, 1), 1);
  close(pipefd[0]);
  kill(child, SIGKILL);
  int status = 0;
  waitpid(child, &status, 0);
  ASSERT_TRUE(WIFSIGNALED(status));

  HistoryStore h = HistoryStore::open(db);
  const auto turns = h.turns("s");
  ASSERT_EQ(turns.size(), size_t(kCommitted));
  for (int t = 0; t < kCommitted; ++t) {
    ASSERT_EQ(turns[t].messages.size(), 2u);
    EXPECT_EQ(turns[t].messages[0].content, "q" + std::to_string(t));
    EXPECT_EQ(turns[t].messages[1].content, std::string(20000, 'a' + t));
  }
  EXPECT_EQ(h.append_turn("s", {msg("user", "after restart")}), kCommitted);  // resumes after the last turn
}

TEST(HistoryStore, RefusesForeignAndCorruptFilesWithoutTouchingThem) {
  TempDir dir;
  const std::string text = dir.file("notes.db");
  std::ofstream(text) << "this is a text file, not a database\n" << std::string(5000, 'z');
  const std::string before = read_bytes(text);
  try {
    HistoryStore::open(text);
    FAIL() << "opened a text file";
  } catch (const hypic::FormatError& e) {
    EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("not a valid hypic database"), std::string::npos) << e.what();
  }
  EXPECT_EQ(read_bytes(text), before);
  EXPECT_FALSE(std::filesystem::exists(text + "-wal"));

  // An SQLite file of another application.
  const std::string other = dir.file("other.db");
  {  // written with the sqlite3 C library (libsqlite3-dev), not the command-line tool setup does not install
    sqlite3* raw = nullptr;
    ASSERT_EQ(sqlite3_open(other.c_str(), &raw), SQLITE_OK);
    const int rc = sqlite3_exec(raw, "CREATE TABLE t(x); INSERT INTO t VALUES(1);", nullptr, nullptr, nullptr);
    sqlite3_close(raw);
    ASSERT_EQ(rc, SQLITE_OK);
  }
  const std::string other_before = read_bytes(other);
  try {
    HistoryStore::open(other);
    FAIL() << "opened a foreign database";
  } catch (const hypic::FormatError& e) {
    EXPECT_NE(std::string(e.what()).find(other + ": not a hypic database"), std::string::npos) << e.what();
  }
  EXPECT_EQ(read_bytes(other), other_before);

  // A hypic file of another kind.
  const std::string fts = dir.file("fts.db");
  {
    hypic::sdk::Database::open(fts, "retrieval", 1, "CREATE TABLE x(y);");
  }
  EXPECT_THROW(HistoryStore::open(fts), hypic::FormatError);

  // A hypic history file whose pages were overwritten.
  const std::string db = dir.file("h.db");
  {
    HistoryStore h = HistoryStore::open(db);
    h.create_session("s");
    for (int i = 0; i < 20; ++i) h.append_turn("s", {msg("user", std::string(3000, 'q'))});
  }
  std::string bytes = read_bytes(db);
  ASSERT_GT(bytes.size(), 20000u);
  for (size_t i = 4096; i < bytes.size(); ++i) bytes[i] = char(0xA5);
  std::ofstream(db, std::ios::binary | std::ios::trunc) << bytes;
  std::filesystem::remove(db + "-wal");
  std::filesystem::remove(db + "-shm");
  try {
    HistoryStore h = HistoryStore::open(db);
    h.turns("s");
    FAIL() << "read a corrupt database";
  } catch (const hypic::FormatError& e) {
    EXPECT_NE(std::string(e.what()).find(db), std::string::npos) << e.what();
  }
}

}  // namespace
