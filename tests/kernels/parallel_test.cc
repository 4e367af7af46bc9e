#include "kernels/cpu/parallel.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace hypic::cpu {
namespace {

// Restores the thread count a test changed, even when an assertion returns early.
struct ThreadsGuard {
  int saved = num_threads();
  ~ThreadsGuard() { set_num_threads(saved); }
};

struct Visit {
  std::vector<int> count;                          // times each index was visited
  std::vector<std::pair<int64_t, int64_t>> ranges;  // every fn(begin, end) call
};

Visit visit(int64_t n, int64_t grain) {
  Visit v;
  v.count.assign(static_cast<size_t>(std::max<int64_t>(n, 0)), 0);
  std::mutex mu;
  parallel_for(n, grain, [&](int64_t b, int64_t e) {
    {
      std::lock_guard<std::mutex> g(mu);
      v.ranges.emplace_back(b, e);
    }
    for (int64_t i = b; i < e; ++i) ++v.count[i];  // ranges are disjoint, so no race if correct
  });
  return v;
}

void expect_covered_once(int64_t n, int64_t grain) {
  const Visit v = visit(n, grain);
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(v.count[i], 1) << "n=" << n << " grain=" << grain << " i=" << i;
  if (n == 0) {
    EXPECT_TRUE(v.ranges.empty());
    return;
  }
  for (const auto& [b, e] : v.ranges) {
    EXPECT_LT(b, e) << "empty range, n=" << n << " grain=" << grain;
    EXPECT_GE(e - b, std::min(n, std::max<int64_t>(grain, 1))) << "range shorter than grain, n=" << n;
  }
  if (n < 2 * std::max<int64_t>(grain, 1)) {
    ASSERT_EQ(v.ranges.size(), 1u) << "n=" << n << " grain=" << grain;
    EXPECT_EQ(v.ranges[0], std::make_pair(int64_t{0}, n));
  }
}

TEST(ParallelFor, VisitsEveryIndexExactlyOnce) {
  ThreadsGuard guard;
  for (int threads : {2, 3, 8}) {
    set_num_threads(threads);
    for (int64_t n : {0, 1, 2, 5, 7, 64, 100, 1000, 12345})
      for (int64_t grain : {-3, 0, 1, 3, 16, 64, 5000}) expect_covered_once(n, grain);
  }
}

TEST(ParallelFor, SplitsIntoSeveralRangesWhenThreadsAllow) {
  ThreadsGuard guard;
  set_num_threads(4);
  const Visit v = visit(1000, 10);
  EXPECT_EQ(v.ranges.size(), 16u);  // 4 parts per thread, each of 1000/16 (62 or 63) >= 10
}

// Two ranges that each wait for the other to start can only finish if they run at the same time.
TEST(ParallelFor, RangesRunConcurrently) {
  ThreadsGuard guard;
  set_num_threads(2);
  std::atomic<int> started{0};
  std::atomic<int> timed_out{0};
  parallel_for(2, 1, [&](int64_t, int64_t) {
    started.fetch_add(1);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (started.load() < 2) {
      if (std::chrono::steady_clock::now() > deadline) {
        timed_out.fetch_add(1);
        return;
      }
      std::this_thread::yield();
    }
  });
  EXPECT_EQ(started.load(), 2);
  EXPECT_EQ(timed_out.load(), 0);
}

// Each caller sums k * i over its own [0, n) with its own n and k, many times, all callers at once.
void run_concurrent_callers(int callers, int iterations) {
  std::atomic<int> failures{0};
  std::mutex mu;
  std::string first_failure;
  std::vector<std::thread> pool;
  for (int t = 0; t < callers; ++t) {
    pool.emplace_back([&, t] {
      for (int it = 0; it < iterations; ++it) {
        const int64_t n = 500 + 97 * t + 13 * it, k = t + 1;
        std::atomic<int64_t> sum{0};
        std::vector<int> count(n, 0);
        parallel_for(n, 1 + t, [&](int64_t b, int64_t e) {
          int64_t s = 0;
          for (int64_t i = b; i < e; ++i) {
            s += k * i;
            ++count[i];
          }
          sum.fetch_add(s);
        });
        const int64_t want = k * n * (n - 1) / 2;
        const bool once = std::all_of(count.begin(), count.end(), [](int c) { return c == 1; });
        if (sum.load() != want || !once) {
          if (failures.fetch_add(1) == 0) {
            std::lock_guard<std::mutex> g(mu);
            first_failure = "caller " + std::to_string(t) + " iteration " + std::to_string(it) + ": sum " +
                            std::to_string(sum.load()) + " want " + std::to_string(want) +
                            (once ? "" : ", some index not visited exactly once");
          }
        }
      }
    });
  }
  // A pool whose callers clobber each other's job can deadlock: fail loudly instead of hanging CTest.
  std::atomic<bool> joined{false};
  std::thread watchdog([&] {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    while (!joined.load()) {
      if (std::chrono::steady_clock::now() > deadline) {
        std::fprintf(stderr, "concurrent parallel_for callers did not finish within 120 s\n");
        std::abort();
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  });
  for (auto& th : pool) th.join();
  joined.store(true);
  watchdog.join();
  EXPECT_EQ(failures.load(), 0) << first_failure;
}

TEST(ParallelFor, TwoConcurrentCallersEachGetTheirOwnResults) { run_concurrent_callers(2, 2000); }

TEST(ParallelFor, FourConcurrentCallersEachGetTheirOwnResults) {
  run_concurrent_callers(4, 1000);
  ThreadsGuard guard;
  set_num_threads(4);
  run_concurrent_callers(4, 500);
}

struct RangeError : std::runtime_error {
  RangeError(const std::string& what, int64_t at) : std::runtime_error(what), index(at) {}
  int64_t index;
};

TEST(ParallelFor, ExceptionFromOneRangeReachesTheCaller) {
  ThreadsGuard guard;
  set_num_threads(4);
  const int64_t n = 1000, bad = 777;
  std::vector<std::atomic<int>> count(n);
  try {
    parallel_for(n, 1, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        if (i == bad) throw RangeError("index " + std::to_string(i) + " failed", i);
        count[i].fetch_add(1);
      }
    });
    FAIL() << "parallel_for returned normally";
  } catch (const RangeError& err) {
    EXPECT_STREQ(err.what(), "index 777 failed");
    EXPECT_EQ(err.index, bad);
  }
  for (int64_t i = 0; i < n; ++i) EXPECT_LE(count[i].load(), 1) << i;  // done once or skipped
  EXPECT_EQ(count[bad].load(), 0);

  // Every range throwing: exactly one exception comes back, and nothing terminates.
  EXPECT_THROW(parallel_for(n, 1, [](int64_t b, int64_t) { throw std::out_of_range(std::to_string(b)); }),
               std::out_of_range);

  // An inline (single-range) call throws the same way.
  EXPECT_THROW(parallel_for(1, 1, [](int64_t, int64_t) { throw std::invalid_argument("inline"); }),
               std::invalid_argument);

  // The pool still works afterwards, from this thread and from concurrent callers.
  for (int64_t m : {1, 10, 1000}) expect_covered_once(m, 1);
  run_concurrent_callers(2, 20);
}

TEST(ParallelFor, NestedCallsRunInlineAndAreCorrect) {
  ThreadsGuard guard;
  set_num_threads(4);
  const int64_t outer = 24, inner = 1000;
  std::vector<int64_t> sums(outer, -1);
  std::vector<int> inner_calls(outer, 0);
  std::atomic<int> moved_thread{0};
  parallel_for(outer, 1, [&](int64_t b, int64_t e) {
    for (int64_t o = b; o < e; ++o) {
      const auto me = std::this_thread::get_id();
      std::atomic<int64_t> s{0};
      parallel_for(inner, 1, [&](int64_t ib, int64_t ie) {
        if (std::this_thread::get_id() != me) moved_thread.fetch_add(1);
        ++inner_calls[o];
        for (int64_t i = ib; i < ie; ++i) s.fetch_add(i * (o + 1));
      });
      sums[o] = s.load();
    }
  });
  for (int64_t o = 0; o < outer; ++o) {
    EXPECT_EQ(sums[o], (o + 1) * inner * (inner - 1) / 2) << o;
    EXPECT_EQ(inner_calls[o], 1) << "nested call was split, o=" << o;
  }
  EXPECT_EQ(moved_thread.load(), 0);

  // An exception from a nested call travels out through both levels.
  EXPECT_THROW(parallel_for(outer, 1,
                            [](int64_t b, int64_t) {
                              parallel_for(10, 1, [b](int64_t, int64_t) {
                                if (b == 0) throw std::logic_error("nested");
                              });
                            }),
               std::logic_error);
}

TEST(ParallelFor, OneThreadRunsInlineAndRestores) {
  const int before = num_threads();
  EXPECT_GE(before, 1);
  set_num_threads(1);
  EXPECT_EQ(num_threads(), 1);
  const auto me = std::this_thread::get_id();
  std::vector<std::pair<int64_t, int64_t>> ranges;
  std::vector<int64_t> out(5000, 0);
  parallel_for(5000, 1, [&](int64_t b, int64_t e) {
    EXPECT_EQ(std::this_thread::get_id(), me);
    ranges.emplace_back(b, e);
    for (int64_t i = b; i < e; ++i) out[i] = 3 * i;
  });
  ASSERT_EQ(ranges.size(), 1u);
  EXPECT_EQ(ranges[0], std::make_pair(int64_t{0}, int64_t{5000}));
  for (int64_t i = 0; i < 5000; ++i) ASSERT_EQ(out[i], 3 * i);

  set_num_threads(0);
  EXPECT_EQ(num_threads(), 1);
  set_num_threads(-7);
  EXPECT_EQ(num_threads(), 1);

  set_num_threads(before);
  EXPECT_EQ(num_threads(), before);
  expect_covered_once(5000, 1);
}

// The default is read once per process, so each value is checked in a fresh child process.
TEST(ParallelForDeathTest, HypicThreadsEnvironmentVariable) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");  // re-executes the binary: a fresh default each time
  const int hw = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const auto default_with = [](const char* value, int want) {
    setenv("HYPIC_THREADS", value, 1);
    std::exit(num_threads() == want ? 0 : 1);
  };
  EXPECT_EXIT(default_with("3", 3), testing::ExitedWithCode(0), "");
  EXPECT_EXIT(default_with("1", 1), testing::ExitedWithCode(0), "");
  for (const char* bad : {"", "0", "-2", "abc", "4x", " 4", "2.5", "99999999999999999999"})
    EXPECT_EXIT(default_with(bad, hw), testing::ExitedWithCode(0), "") << "HYPIC_THREADS='" << bad << "'";
}

}  // namespace
}  // namespace hypic::cpu
