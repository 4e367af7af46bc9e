// The engine thread of `hypic serve`: the device runs one pass at a time, so every request becomes a job
// that this thread runs. Jobs wait in a bounded queue (submit() refuses with 429 when it is full) taken
// round-robin between tenants, so one client's burst does not starve the others. Decoding is batched
// across all running jobs: each loop runs ONE pass that advances every running generation by a token
// (Engine::decode_batch), and admits at most one waiting prompt between such steps, so a prompt stalls
// the running decodes for at most one prefill.
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "sdk/session.h"
#include "tools/hypic/serve/metrics.h"
#include "tools/hypic/serve/openai_protocol.h"

namespace hypic::serve {

// What a job reports, in order, on the engine thread: Prompt once (after its prefill), Text pieces, then
// Done; or Error alone when its prompt was refused.
struct JobEvent {
  enum class Kind { Prompt, Text, Done, Error } kind;
  PromptReport prompt;          // Prompt
  std::string text;             // Text
  std::string finish;           // Done: stop | length | cancelled
  int64_t completion_tokens = 0;  // Done
  int status = 0;               // Error
  std::string message;          // Error
};

struct Job {
  std::string tenant;  // fairness and cache isolation (hashed into segment keys)
  std::vector<PromptBlock> blocks;
  std::vector<std::string> block_kinds;  // per block, for the report
  std::vector<std::string> block_ids;    // per block, for the report (template block ids, else empty)
  Sampling sampling;
  std::atomic<bool> cancel{false};
  // Called on the engine thread; must not block (it hands the event to the connection).
  std::function<void(JobEvent)> sink;
  std::chrono::steady_clock::time_point arrived = std::chrono::steady_clock::now();
};

class Scheduler {
 public:
  // `max_running`: generations decoded together; `max_queued`: jobs that may wait beyond them.
  Scheduler(sdk::Runtime& rt, Metrics& metrics, size_t max_running, size_t max_queued);
  ~Scheduler();  // stops the thread; jobs still queued or running end with Done(cancelled)

  // ApiError 429 when the queue is full, 503 once stopping.
  void submit(std::shared_ptr<Job> job);
  void stop();
  size_t queued() const;
  size_t running() const { return running_count_.load(); }

 private:
  struct Running {
    std::shared_ptr<Job> job;
    std::unique_ptr<sdk::Session> session;
    std::unique_ptr<sdk::GenerationSteps> steps;
    std::chrono::steady_clock::time_point last_token;
  };
  void loop();
  std::shared_ptr<Job> next_job();  // under mu_
  void admit(std::shared_ptr<Job> job);
  void step_all();

  sdk::Runtime& rt_;
  Metrics& metrics_;
  size_t max_running_, max_queued_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, std::deque<std::shared_ptr<Job>>> queues_;  // per tenant
  std::string last_tenant_;  // round-robin position
  size_t queued_ = 0;
  bool stopping_ = false;
  std::vector<Running> running_;  // engine thread only
  std::atomic<size_t> running_count_{0};
  std::thread thread_;
};

}  // namespace hypic::serve
