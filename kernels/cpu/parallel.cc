#include "kernels/cpu/parallel.h"

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <tbb/partitioner.h>
#include <tbb/task_arena.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>

namespace hypic::cpu {
namespace {

// HYPIC_THREADS must be a whole positive integer; anything else (typos, overflow) falls back quietly.
int default_threads() {
  if (const char* env = std::getenv("HYPIC_THREADS")) {
    const char* end = env + std::strlen(env);
    int n = 0;
    const auto [p, ec] = std::from_chars(env, end, n);
    if (ec == std::errc() && p == end && n > 0) return n;
  }
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

// The only shared state: a setting read at the start of each call, never a job slot.
std::atomic<int>& thread_setting() {
  static std::atomic<int> n{default_threads()};
  return n;
}

}  // namespace

int num_threads() { return thread_setting().load(std::memory_order_relaxed); }
void set_num_threads(int n) { thread_setting().store(std::max(1, n), std::memory_order_relaxed); }

namespace {

thread_local int t_depth = 0;  // > 0 while this thread runs a range of some parallel_for

// One arena per thread count: callers share its workers (oneTBB's work stealing, idle workers sleep),
// so concurrent callers neither oversubscribe the cores nor wait on each other's stragglers.
tbb::task_arena& arena_for(int threads) {
  static std::mutex mu;
  static std::unordered_map<int, std::unique_ptr<tbb::task_arena>> arenas;
  std::lock_guard<std::mutex> g(mu);
  auto& a = arenas[threads];
  if (!a) a = std::make_unique<tbb::task_arena>(threads);
  return *a;
}

}  // namespace

void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  const int64_t threads = num_threads();
  // A few parts per thread evens out uneven ranges; parts <= n / grain keeps every range >= grain.
  const int64_t parts = std::min(threads * 4, std::max<int64_t>(1, n / grain));
  // A nested call runs inline: the outer loop already occupies the workers.
  if (parts <= 1 || threads == 1 || t_depth > 0) {
    fn(0, n);
    return;
  }
  const int64_t base = n / parts, extra = n % parts;  // the first `extra` ranges get one more index
  const auto begin = [&](int64_t p) { return p * base + std::min(p, extra); };
  // Ranges not yet started are skipped once one has thrown; oneTBB rethrows the first exception here.
  std::atomic<bool> failed{false};
  arena_for(static_cast<int>(threads)).execute([&] {
    tbb::parallel_for(
        tbb::blocked_range<int64_t>(0, parts, 1),
        [&](const tbb::blocked_range<int64_t>& r) {
          for (int64_t p = r.begin(); p != r.end(); ++p) {
            if (failed.load(std::memory_order_relaxed)) return;
            ++t_depth;
            try {
              fn(begin(p), begin(p + 1));
            } catch (...) {
              --t_depth;
              failed.store(true, std::memory_order_relaxed);
              throw;
            }
            --t_depth;
          }
        },
        tbb::simple_partitioner());
  });
}

}  // namespace hypic::cpu
