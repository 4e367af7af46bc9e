// The engine thread of `hypic serve`: the device runs one pass at a time, so every request becomes a job
// that this thread runs. Jobs wait in a bounded queue (submit() refuses with 429 when it is full) taken
// round-robin between tenants, so one client's burst does not starve the others. Decoding is batched
// across all running jobs: each loop runs ONE pass that advances every running generation by a token
// (Engine::decode_batch) and at most one chunk of `prefill_chunk` tokens of the prompt being admitted
// (Engine::begin / PromptJob), so an arriving prompt stalls the running decodes for one chunk at a time,
// not for its whole prefill. Prompts are admitted one at a time, in the queue's order.
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
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
  // Text and Done: the logprobs of the tokens sampled since the last event (Sampling::logprobs >= 0); a
  // token's entry comes with or before the text piece that holds its text.
  std::vector<sdk::TokenLogprob> logprobs;
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
  std::vector<sdk::TokenLogprob> pending_logprobs;  // engine thread: entries not yet sent
  std::chrono::steady_clock::time_point arrived = std::chrono::steady_clock::now();
};

// One step of the engine thread, reported to SchedulerOptions::on_step.
struct EngineStep {
  enum class Kind { PromptChunk, Decode } kind;
  const Job* job = nullptr;  // PromptChunk: the job being admitted
  int64_t tokens = 0;        // PromptChunk: prompt tokens it ran; Decode: generations it advanced
  int64_t remaining = 0;     // PromptChunk: prompt tokens still to run after it
};

struct SchedulerOptions {
  size_t max_running = 16;        // generations decoded together
  size_t max_queued = 64;         // jobs that may wait beyond them
  int64_t prefill_chunk = 2048;   // prompt tokens run between two decode steps
  // Called on the engine thread after every prompt chunk and decode step (tests, tracing); must not block.
  std::function<void(const EngineStep&)> on_step;
};

class Scheduler {
 public:
  Scheduler(sdk::Runtime& rt, Metrics& metrics, SchedulerOptions opt);
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
  // The prompt being admitted: its session and the engine's job, run a chunk per loop.
  struct Admitting {
    std::shared_ptr<Job> job;
    std::unique_ptr<sdk::Session> session;
    std::unique_ptr<PromptJob> prompt;
    double queue_s = 0;
  };
  void loop();
  std::shared_ptr<Job> next_job();  // under mu_
  void start_prompt(std::shared_ptr<Job> job);
  void prompt_chunk();
  void start_generation(Admitting& a);
  void step_all();

  sdk::Runtime& rt_;
  Metrics& metrics_;
  SchedulerOptions opt_;
  size_t max_running_, max_queued_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, std::deque<std::shared_ptr<Job>>> queues_;  // per tenant
  std::string last_tenant_;  // round-robin position
  size_t queued_ = 0;
  bool stopping_ = false;
  std::vector<Running> running_;  // engine thread only
  std::unique_ptr<Admitting> admitting_;  // engine thread only
  // Decode stalls: a prompt chunk ran while generations waited, since the decode step that ended at
  // last_decode_ (valid while generations are running).
  bool stalled_ = false;
  std::optional<std::chrono::steady_clock::time_point> last_decode_;
  std::atomic<size_t> running_count_{0};
  std::thread thread_;
};

}  // namespace hypic::serve
