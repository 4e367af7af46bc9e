// The disk tier (sdk/cache_dir) with records of real entries (the CPU backend of a fixture model): what is
// put comes back after a reopen; a damaged, truncated or missing file is dropped with a log line and never
// served; the byte budget evicts the cheapest entries per byte; and a writer killed with SIGKILL at 60
// random moments never leaves a corrupt entry to be served, never loses a committed one, and leaves the
// index consistent with the files.
#include "sdk/cache_dir.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>

#include <sys/wait.h>
#include <unistd.h>

#include "runtime/backends.h"
#include "runtime/engine.h"
#include "runtime/error.h"
#include "tests/sdk/temp_dir.h"
#include "tests/runtime/token_blocks.h"

namespace hypic::sdk {
namespace {

namespace fs = std::filesystem;
const std::string kModel = std::string(HYPIC_SOURCE_DIR) + "/tests/fixtures/models/qwen3_5_dense";

using testing_util::block;

// Records of distinct entries (of different sizes) and an id for each.
struct Records {
  std::vector<std::string> rec;
  static Records make(int n) {
    auto b = open_backend(kModel, Device::Cpu);
    Engine e(*b, CacheMode::Hypic, {});
    Records r;
    for (int i = 0; i < n; ++i)
      r.rec.push_back(encode_entry(*b, e.keys(), *e.prefill_segment(block(16 + 8 * (i % 5), i)), {}));
    return r;
  }
  static std::string id(int i) {
    char buf[40];
    std::snprintf(buf, sizeof buf, "c%032x", i * 2654435761u);
    return buf;
  }
};

const Records& records() {
  static const Records r = Records::make(8);
  return r;
}

TEST(CacheDir, PutGetAndReopen) {
  test::TempDir t;
  const std::string dir = t.file("cache");
  {
    auto c = CacheDir::open(dir);
    EXPECT_FALSE(c->contains(Records::id(1)));
    EXPECT_EQ(c->get(Records::id(1)), std::nullopt);
    c->put(Records::id(1), records().rec[1], 24);
    c->put(Records::id(2), records().rec[2], 32);
    EXPECT_TRUE(c->contains(Records::id(1)));
  }
  auto c = CacheDir::open(dir);
  EXPECT_EQ(c->get(Records::id(1)), records().rec[1]);
  EXPECT_EQ(c->get(Records::id(2)), records().rec[2]);
  const CacheDirStats s = c->stats();
  EXPECT_EQ(s.entries, 2);
  EXPECT_EQ(s.content_entries, 2);
  EXPECT_EQ(s.tokens, 56);
  EXPECT_EQ(s.hits, 2);
  EXPECT_EQ(s.bytes, int64_t(records().rec[1].size() + records().rec[2].size()));
  EXPECT_EQ(c->list().size(), 2u);
  const CacheDirVerify v = c->verify();
  EXPECT_EQ(v.checked, 2);
  EXPECT_EQ(v.intact, 2);
  EXPECT_EQ(c->clear(), 2);
  EXPECT_EQ(c->stats().entries, 0);
  EXPECT_TRUE(fs::is_empty(fs::path(dir) / "entries"));
}

TEST(CacheDir, BadIdsAndRecordsAreRefused) {
  test::TempDir t;
  auto c = CacheDir::open(t.file("cache"));
  EXPECT_THROW(c->put("../escape", records().rec[0], 1), InvalidArgument);
  EXPECT_THROW(c->put("x" + Records::id(1).substr(1), records().rec[0], 1), InvalidArgument);
  EXPECT_THROW(c->put(Records::id(1), "not a record", 1), FormatError);
  EXPECT_EQ(c->stats().entries, 0);
  // A file that is not a cache index is refused, and left as it was.
  fs::create_directories(t.file("other"));
  std::ofstream(t.file("other/index.sqlite"), std::ios::binary) << std::string(4096, 'x');
  EXPECT_THROW(CacheDir::open(t.file("other")), FormatError);
}

TEST(CacheDir, DamagedFilesAreDroppedLoggedAndNeverServed) {
  test::TempDir t;
  const std::string dir = t.file("cache");
  auto c = CacheDir::open(dir);
  for (int i = 0; i < 4; ++i) c->put(Records::id(i), records().rec[i], 10);
  {  // a flipped byte
    std::fstream f(c->entry_path(Records::id(0)), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(100);
    f.put('\x7f');
  }
  fs::resize_file(c->entry_path(Records::id(1)), 50);  // a torn file
  fs::remove(c->entry_path(Records::id(2)));            // a lost file
  testing::internal::CaptureStderr();
  EXPECT_EQ(c->get(Records::id(0)), std::nullopt);
  EXPECT_EQ(c->get(Records::id(1)), std::nullopt);
  EXPECT_EQ(c->get(Records::id(2)), std::nullopt);
  const std::string log = testing::internal::GetCapturedStderr();
  EXPECT_NE(log.find(Records::id(0) + " (" + c->entry_path(Records::id(0)) + ") dropped"), std::string::npos) << log;
  EXPECT_NE(log.find("checksum does not match"), std::string::npos) << log;
  EXPECT_NE(log.find("the index says"), std::string::npos) << log;
  EXPECT_NE(log.find("file is missing"), std::string::npos) << log;
  EXPECT_FALSE(c->contains(Records::id(0)));
  EXPECT_EQ(c->get(Records::id(3)), records().rec[3]);
  EXPECT_EQ(c->stats().entries, 1);
  // verify finds damage get() has not met yet.
  fs::resize_file(c->entry_path(Records::id(3)), 10);
  testing::internal::CaptureStderr();
  const CacheDirVerify v = c->verify();
  testing::internal::GetCapturedStderr();
  EXPECT_EQ(v.checked, 1);
  EXPECT_EQ(v.dropped, 1);
  ASSERT_EQ(v.problems.size(), 1u);
  EXPECT_NE(v.problems[0].find(Records::id(3)), std::string::npos);
}

TEST(CacheDir, BudgetEvictsTheLeastCostPerByte) {
  test::TempDir t;
  const int64_t one = static_cast<int64_t>(records().rec[0].size());
  auto c = CacheDir::open(t.file("cache"), 3 * one + one / 2);
  // Same-size records; entry 1 saves the most recompute (many tokens), entry 0 is used often.
  c->put(Records::id(0), records().rec[0], 10);
  c->put(Records::id(1), records().rec[0], 1000);
  c->put(Records::id(2), records().rec[0], 10);
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(c->get(Records::id(0)));
  c->put(Records::id(3), records().rec[0], 10);  // over budget: 2 goes (fewest tokens x hits per byte)
  EXPECT_TRUE(c->contains(Records::id(0)));
  EXPECT_TRUE(c->contains(Records::id(1)));
  EXPECT_FALSE(c->contains(Records::id(2)));
  EXPECT_TRUE(c->contains(Records::id(3)));
  EXPECT_FALSE(fs::exists(c->entry_path(Records::id(2))));
  EXPECT_LE(c->stats().bytes, 3 * one + one / 2);
}

TEST(CacheDir, LeftoversOfACrashAreRemovedAtOpen) {
  test::TempDir t;
  const std::string dir = t.file("cache");
  {
    auto c = CacheDir::open(dir);
    c->put(Records::id(1), records().rec[1], 10);
  }
  // A temporary of a writer that died (pid 0x7fffffff is not running), and a renamed but unindexed file.
  const std::string tmp = (fs::path(dir) / "entries" / (Records::id(2) + ".ent.tmp.2147483646.0")).string();
  std::ofstream(tmp) << "partial";
  const std::string orphan = (fs::path(dir) / "entries" / (Records::id(3) + ".ent")).string();
  std::ofstream(orphan) << records().rec[3];
  // An unindexed file younger than a minute may be another process's, between its rename and its row.
  fs::last_write_time(orphan, fs::file_time_type::clock::now() - std::chrono::minutes(5));
  const std::string young = (fs::path(dir) / "entries" / (Records::id(4) + ".ent")).string();
  std::ofstream(young) << records().rec[4];
  auto c = CacheDir::open(dir);
  EXPECT_FALSE(fs::exists(tmp));
  EXPECT_FALSE(fs::exists(orphan));
  EXPECT_TRUE(fs::exists(young));
  EXPECT_EQ(c->get(Records::id(1)), records().rec[1]);
  EXPECT_EQ(c->stats().entries, 1);
}

// The writer: puts records in a loop, reporting each id on the pipe once put() has returned.
[[noreturn]] void writer(const std::string& dir, int fd, uint32_t seed) {
  auto c = CacheDir::open(dir);
  const int32_t opened = -1;
  if (::write(fd, &opened, sizeof opened) != sizeof opened) _exit(3);
  std::mt19937 rng(seed);
  for (;;) {
    const int i = static_cast<int>(rng() % 40);
    c->put(Records::id(i), records().rec[i % 8], 10);
    const int32_t done = i;
    if (::write(fd, &done, sizeof done) != sizeof done) _exit(3);
  }
}

TEST(CacheDir, WriterKilledAtRandomMomentsNeverLeavesACorruptEntry) {
  test::TempDir t;
  const std::string dir = t.file("cache");
  records();  // built before forking
  std::mt19937 rng(12345);
  std::set<int> committed;
  std::vector<std::string> ids;
  for (int i = 0; i < 40; ++i) ids.push_back(Records::id(i));
  int kills = 0;
  for (int round = 0; round < 60; ++round) {
    int p[2];
    ASSERT_EQ(::pipe(p), 0);
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      ::close(p[0]);
      writer(dir, p[1], static_cast<uint32_t>(round));
    }
    ::close(p[1]);
    // Once the writer has opened the directory, it is killed 0-120 ms later: inside a write (the
    // temporary, its sync, the rename, the index commit) or between two.
    int32_t opened;
    ASSERT_EQ(::read(p[0], &opened, sizeof opened), sizeof opened);
    ASSERT_EQ(opened, -1);
    ::usleep(static_cast<useconds_t>(rng() % 120000));
    ::kill(pid, SIGKILL);
    int status = 0;
    ::waitpid(pid, &status, 0);
    kills += WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
    int32_t id;
    while (::read(p[0], &id, sizeof id) == sizeof id) committed.insert(id);
    ::close(p[0]);

    // Load: every committed entry intact, every entry served intact, the index matching the files.
    auto c = CacheDir::open(dir);
    for (int i : committed) {
      std::optional<std::string> r = c->get(Records::id(i));
      ASSERT_TRUE(r) << "round " << round << ": committed entry " << i << " lost";
      ASSERT_EQ(*r, records().rec[i % 8]) << "round " << round << ": entry " << i << " corrupt";
    }
    // Every entry in the index, committed or caught between its index row and the pipe, is served whole.
    for (const CacheDirEntry& e : c->list()) {
      const int i = static_cast<int>(std::find(ids.begin(), ids.end(), e.id) - ids.begin());
      ASSERT_LT(i, 40) << "round " << round << ": an entry nobody wrote: " << e.id;
      std::optional<std::string> r = c->get(e.id);
      ASSERT_TRUE(r) << "round " << round << ": indexed entry " << i << " not served";
      ASSERT_EQ(*r, records().rec[i % 8]) << "round " << round << ": served a corrupt entry " << i;
    }
    // No temporary survives its dead writer; every file is indexed, or renamed whole just before the
    // kill (its row not committed: left for a minute, in case another process is writing it).
    std::set<std::string> indexed;
    for (const CacheDirEntry& e : c->list()) indexed.insert(e.id);
    for (const auto& f : fs::directory_iterator(fs::path(dir) / "entries")) {
      ASSERT_TRUE(f.path().extension() == ".ent") << "round " << round << ": leftover " << f.path();
      const std::string id = f.path().stem().string();
      if (indexed.count(id)) continue;
      const int i = static_cast<int>(std::find(ids.begin(), ids.end(), id) - ids.begin());
      ASSERT_LT(i, 40) << f.path();
      std::ifstream in(f.path(), std::ios::binary);
      const std::string body((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      EXPECT_EQ(body, records().rec[i % 8]) << "round " << round << ": a torn unindexed file " << f.path();
    }
  }
  const CacheDirVerify v = CacheDir::open(dir)->verify();  // every file read back and checked
  EXPECT_EQ(v.dropped, 0);
  EXPECT_EQ(v.intact, v.checked);
  EXPECT_EQ(kills, 60);
  EXPECT_GT(committed.size(), 10u);
  std::printf("[ metrics  ] 60 writers killed with SIGKILL, %zu distinct entries committed, none lost or corrupt\n",
              committed.size());
}

}  // namespace
}  // namespace hypic::sdk
