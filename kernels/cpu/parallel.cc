#include "kernels/cpu/parallel.h"

#include <algorithm>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <thread>
#include <vector>

namespace hypic::cpu {
namespace {

thread_local bool t_inside_pool = false;

class Pool {
 public:
  explicit Pool(int n) { resize(n); }
  ~Pool() { stop(); }

  int size() const { return static_cast<int>(workers_.size()) + 1; }

  void resize(int n) {
    stop();
    std::lock_guard<std::mutex> g(mu_);
    quit_ = false;
    for (int i = 1; i < n; ++i) workers_.emplace_back([this] { loop(); });
  }

  void run(int parts, const std::function<void(int)>& job) {
    std::unique_lock<std::mutex> lk(mu_);
    job_ = &job;
    parts_ = parts;
    next_ = 0;
    pending_ = parts;
    ++generation_;
    cv_.notify_all();
    lk.unlock();
    work();  // the caller takes parts too
    lk.lock();
    done_cv_.wait(lk, [&] { return pending_ == 0; });
    job_ = nullptr;
  }

 private:
  void work() {
    t_inside_pool = true;
    for (;;) {
      int part;
      const std::function<void(int)>* job;
      {
        std::lock_guard<std::mutex> g(mu_);
        if (!job_ || next_ >= parts_) break;
        part = next_++;
        job = job_;
      }
      (*job)(part);
      std::lock_guard<std::mutex> g(mu_);
      if (--pending_ == 0) done_cv_.notify_all();
    }
    t_inside_pool = false;
  }

  void loop() {
    uint64_t seen = 0;
    for (;;) {
      {
        std::unique_lock<std::mutex> lk(mu_);
        cv_.wait(lk, [&] { return quit_ || generation_ != seen; });
        if (quit_) return;
        seen = generation_;
      }
      work();
    }
  }

  void stop() {
    {
      std::lock_guard<std::mutex> g(mu_);
      quit_ = true;
      cv_.notify_all();
    }
    for (auto& t : workers_) t.join();
    workers_.clear();
  }

  std::mutex mu_;
  std::condition_variable cv_, done_cv_;
  std::vector<std::thread> workers_;
  const std::function<void(int)>* job_ = nullptr;
  int parts_ = 0, next_ = 0, pending_ = 0;
  uint64_t generation_ = 0;
  bool quit_ = false;
};

int default_threads() {
  if (const char* env = std::getenv("HYPIC_THREADS")) {
    int n = std::atoi(env);
    if (n > 0) return n;
  }
  return std::max(1u, std::thread::hardware_concurrency());
}

Pool& pool() {
  static Pool p(default_threads());
  return p;
}

}  // namespace

int num_threads() { return pool().size(); }
void set_num_threads(int n) { pool().resize(std::max(1, n)); }

void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  const int threads = num_threads();
  int64_t parts = std::min<int64_t>(threads * 4, (n + grain - 1) / grain);
  if (parts <= 1 || threads == 1 || t_inside_pool) {
    fn(0, n);
    return;
  }
  const int64_t step = (n + parts - 1) / parts;
  parts = (n + step - 1) / step;
  std::function<void(int)> job = [&](int p) {
    const int64_t b = p * step, e = std::min(n, b + step);
    if (b < e) fn(b, e);
  };
  pool().run(static_cast<int>(parts), job);
}

}  // namespace hypic::cpu
