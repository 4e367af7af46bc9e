#include "tools/hypic/serve/scheduler.h"

#include <algorithm>

namespace hypic::serve {

using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

}  // namespace

Scheduler::Scheduler(sdk::Runtime& rt, Metrics& metrics, size_t max_running, size_t max_queued)
    : rt_(rt), metrics_(metrics), max_running_(std::max<size_t>(1, max_running)), max_queued_(max_queued) {
  thread_ = std::thread([this] { loop(); });
}

Scheduler::~Scheduler() { stop(); }

void Scheduler::stop() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

size_t Scheduler::queued() const {
  std::lock_guard<std::mutex> l(mu_);
  return queued_;
}

void Scheduler::submit(std::shared_ptr<Job> job) {
  {
    std::lock_guard<std::mutex> l(mu_);
    if (stopping_) throw ApiError(503, "service_unavailable", "the server is shutting down");
    // Room for max_running_ jobs about to start plus the queue proper.
    if (queued_ >= max_queued_ + max_running_)
      throw ApiError(429, "rate_limit_exceeded", "the server is busy: " + std::to_string(queued_) +
                                                     " requests are waiting; retry later");
    queues_[job->tenant].push_back(std::move(job));
    ++queued_;
  }
  cv_.notify_all();
}

std::shared_ptr<Job> Scheduler::next_job() {
  if (queued_ == 0) return nullptr;
  // The first tenant after the last one served, wrapping around.
  auto it = queues_.upper_bound(last_tenant_);
  if (it == queues_.end()) it = queues_.begin();
  std::shared_ptr<Job> job = std::move(it->second.front());
  it->second.pop_front();
  last_tenant_ = it->first;
  if (it->second.empty()) queues_.erase(it);
  --queued_;
  return job;
}

void Scheduler::loop() {
  for (;;) {
    std::shared_ptr<Job> job;
    {
      std::unique_lock<std::mutex> l(mu_);
      cv_.wait(l, [&] { return stopping_ || queued_ > 0 || !running_.empty(); });
      if (stopping_) {
        for (auto& [t, q] : queues_)
          for (auto& j : q) j->sink({JobEvent::Kind::Done, {}, {}, "cancelled"});
        queues_.clear();
        queued_ = 0;
        break;
      }
      if (running_.size() < max_running_) job = next_job();
    }
    // One prompt between decode steps bounds how long running generations stall.
    if (job) admit(std::move(job));
    if (!running_.empty()) step_all();
  }
  for (auto& r : running_) r.job->sink({JobEvent::Kind::Done, {}, {}, "cancelled"});
  running_.clear();
  running_count_ = 0;
}

void Scheduler::admit(std::shared_ptr<Job> job) {
  if (job->cancel.load()) {  // the client left while it waited
    metrics_.cancelled();
    job->sink({JobEvent::Kind::Done, {}, {}, "cancelled"});
    return;
  }
  Running r;
  r.job = job;
  r.session = std::make_unique<sdk::Session>(rt_);
  r.session->set_prompt_checkpoint(false);  // one request, one prompt: no later turn continues it
  r.session->set_key_namespace(job->tenant);
  const double queue_s = seconds_since(job->arrived);
  PromptResult pr;
  try {
    pr = r.session->prefill(job->blocks);
  } catch (const InvalidArgument& e) {
    job->sink({JobEvent::Kind::Error, {}, {}, {}, 0, 400, e.what()});
    return;
  } catch (const std::exception& e) {
    job->sink({JobEvent::Kind::Error, {}, {}, {}, 0, 500, e.what()});
    return;
  }
  JobEvent ev{JobEvent::Kind::Prompt};
  ev.prompt.prompt_tokens = pr.prompt_tokens;
  ev.prompt.computed_tokens = pr.computed_tokens;
  ev.prompt.reused_tokens = pr.reused_tokens;
  ev.prompt.ttft_ms = pr.ttft_ms;
  ev.prompt.queue_ms = queue_s * 1000.0;
  int64_t hits = 0, misses = 0;
  for (size_t i = 0; i < pr.blocks.size(); ++i) {
    const std::string kind = i < job->block_kinds.size() ? job->block_kinds[i] : "message";
    const std::string id = i < job->block_ids.size() ? job->block_ids[i] : "";
    ev.prompt.blocks.push_back({kind, pr.blocks[i].tokens, pr.blocks[i].hit, id});
    (pr.blocks[i].hit ? hits : misses) += 1;
  }
  metrics_.prompt(pr.prompt_tokens, pr.computed_tokens, hits, misses, seconds_since(job->arrived));
  job->sink(std::move(ev));

  sdk::GenerateOptions opt;
  opt.max_tokens = job->sampling.max_tokens;
  opt.sampling.temperature = job->sampling.temperature;
  opt.sampling.top_p = job->sampling.top_p;
  opt.seed = job->sampling.seed;
  opt.stop = job->sampling.stop;
  opt.ignore_eos = job->sampling.ignore_eos;
  opt.cancel = &job->cancel;
  Job* raw = job.get();
  opt.on_text = [raw](std::string_view t) { raw->sink({JobEvent::Kind::Text, {}, std::string(t)}); };
  r.steps = std::make_unique<sdk::GenerationSteps>(*r.session, std::move(opt));
  r.last_token = Clock::now();
  running_.push_back(std::move(r));
  running_count_ = running_.size();
}

void Scheduler::step_all() {
  std::vector<sdk::Session*> batch;
  std::vector<Running> still;
  for (Running& r : running_) {
    // A generation that reached the model's context ends there (the others go on).
    bool room = true;
    try {
      rt_.config().check_length(r.session->length() + 1);
    } catch (const Error&) {
      room = false;
    }
    if (!room) {
      metrics_.completion_tokens(static_cast<int64_t>(r.steps->result().tokens.size()));
      r.job->sink({JobEvent::Kind::Done, {}, {}, "length", static_cast<int64_t>(r.steps->result().tokens.size())});
      continue;
    }
    bool more = false;
    try {
      more = r.steps->step();
    } catch (const std::exception& e) {
      // One generation's failure (a token its detokenizer refuses, ...) ends that request only.
      r.job->sink({JobEvent::Kind::Error, {}, {}, {}, 0, 500, e.what()});
      continue;
    }
    if (more) {
      batch.push_back(r.session.get());
      still.push_back(std::move(r));
      continue;
    }
    const sdk::Generation& g = r.steps->result();
    const std::string finish = sdk::finish_name(g.finish);
    if (g.finish == sdk::Generation::Finish::Cancelled) metrics_.cancelled();
    metrics_.completion_tokens(static_cast<int64_t>(g.tokens.size()));
    r.job->sink({JobEvent::Kind::Done, {}, {}, finish, static_cast<int64_t>(g.tokens.size())});
    // The session (its state, K/V and all) is freed here.
  }
  running_ = std::move(still);
  running_count_ = running_.size();
  if (batch.empty()) return;
  try {
    sdk::Session::run_sampled(batch);
  } catch (const std::exception& e) {
    // A failed pass (out of context, a device error) ends every generation in it.
    for (auto& r : running_) r.job->sink({JobEvent::Kind::Error, {}, {}, {}, 0, 500, e.what()});
    running_.clear();
    running_count_ = 0;
    return;
  }
  const auto now = Clock::now();
  for (Running& r : running_) {
    metrics_.inter_token(std::chrono::duration<double>(now - r.last_token).count());
    r.last_token = now;
  }
}

}  // namespace hypic::serve
