#include "runtime/communicator.h"

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <mutex>

#include "runtime/backend.h"
#include "runtime/error.h"

namespace hypic {

// A barrier that an aborted rank can break (std::barrier cannot release its waiters).
class AbortableBarrier {
 public:
  explicit AbortableBarrier(int n) : n_(n) {}
  void arrive_and_wait() {
    std::unique_lock<std::mutex> g(mu_);
    if (aborted_) throw DeviceError("a tensor-parallel rank failed: the group was aborted");
    const uint64_t gen = generation_;
    if (++arrived_ == n_) {
      arrived_ = 0;
      ++generation_;
      cv_.notify_all();
      return;
    }
    cv_.wait(g, [&] { return generation_ != gen || aborted_; });
    if (generation_ == gen) throw DeviceError("a tensor-parallel rank failed: the group was aborted");
  }
  void abort() {
    std::lock_guard<std::mutex> g(mu_);
    aborted_ = true;
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int n_, arrived_ = 0;
  uint64_t generation_ = 0;
  bool aborted_ = false;
};

struct ThreadCommunicator::Shared {
  explicit Shared(int n) : ranks(n), ptrs(static_cast<size_t>(n)), sizes(static_cast<size_t>(n)), sync(n) {}
  int ranks;
  std::vector<float*> ptrs;   // each rank's buffer of the current call
  std::vector<size_t> sizes;  // and its length (checked equal)
  AbortableBarrier sync;
};

std::vector<std::shared_ptr<Communicator>> ThreadCommunicator::group(int ranks) {
  if (ranks < 1) throw InvalidArgument("a communicator group needs at least one rank, got " + std::to_string(ranks));
  auto s = std::make_shared<Shared>(ranks);
  std::vector<std::shared_ptr<Communicator>> out;
  for (int r = 0; r < ranks; ++r) out.push_back(std::make_shared<ThreadCommunicator>(s, r));
  return out;
}

int ThreadCommunicator::size() const { return s_->ranks; }

void ThreadCommunicator::abort() { s_->sync.abort(); }

void ThreadCommunicator::all_reduce_sum(float* data, size_t n) {
  if (s_->ranks == 1) return;
  const size_t me = static_cast<size_t>(rank_);
  s_->ptrs[me] = data;
  s_->sizes[me] = n;
  s_->sync.arrive_and_wait();  // every rank's buffer is published
  HYPIC_ASSERT(std::all_of(s_->sizes.begin(), s_->sizes.end(), [&](size_t m) { return m == n; }),
               "ranks reduce buffers of different sizes");
  sum_.assign(s_->ptrs[0], s_->ptrs[0] + n);
  for (int r = 1; r < s_->ranks; ++r) {
    const float* in = s_->ptrs[static_cast<size_t>(r)];
    for (size_t i = 0; i < n; ++i) sum_[i] += in[i];
  }
  s_->sync.arrive_and_wait();  // every rank has read every buffer
  std::memcpy(data, sum_.data(), n * sizeof(float));
}

void StagedCommunicator::all_reduce_sum(float* data, size_t n) {
  if (size() == 1) return;
  staged_.resize(n);
  b_.copy_to_host(data, staged_.data(), n * sizeof(float));
  host_->all_reduce_sum(staged_.data(), n);
  b_.copy_from_host(staged_.data(), data, n * sizeof(float));
}

}  // namespace hypic
