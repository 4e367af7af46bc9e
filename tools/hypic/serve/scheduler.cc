#include "tools/hypic/serve/scheduler.h"

#include <algorithm>

namespace hypic::serve {

using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

}  // namespace

Scheduler::Scheduler(sdk::Runtime& rt, Metrics& metrics, SchedulerOptions opt)
    : rt_(rt),
      metrics_(metrics),
      opt_(std::move(opt)),
      max_running_(std::max<size_t>(1, opt_.max_running)),
      max_queued_(opt_.max_queued) {
  if (opt_.prefill_chunk < 1) throw InvalidArgument("the prefill chunk must be at least 1 token");
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
      cv_.wait(l, [&] { return stopping_ || queued_ > 0 || !running_.empty() || admitting_; });
      if (stopping_) {
        for (auto& [t, q] : queues_)
          for (auto& j : q) j->sink({JobEvent::Kind::Done, {}, {}, "cancelled"});
        queues_.clear();
        queued_ = 0;
        break;
      }
      if (!admitting_ && running_.size() < max_running_) job = next_job();
    }
    if (job) start_prompt(std::move(job));
    // One chunk of one prompt between decode steps bounds how long running generations stall.
    if (admitting_) prompt_chunk();
    if (!running_.empty()) step_all();
  }
  if (admitting_) admitting_->job->sink({JobEvent::Kind::Done, {}, {}, "cancelled"});
  admitting_.reset();
  for (auto& r : running_) r.job->sink({JobEvent::Kind::Done, {}, {}, "cancelled"});
  running_.clear();
  running_count_ = 0;
}

void Scheduler::start_prompt(std::shared_ptr<Job> job) {
  if (job->cancel.load()) {  // the client left while it waited
    metrics_.cancelled();
    job->sink({JobEvent::Kind::Done, {}, {}, "cancelled"});
    return;
  }
  auto a = std::make_unique<Admitting>();
  a->job = job;
  a->session = std::make_unique<sdk::Session>(rt_);
  a->session->set_prompt_checkpoint(false);  // one request, one prompt: no later turn continues it
  a->session->set_key_namespace(job->tenant);
  a->queue_s = seconds_since(job->arrived);
  try {
    a->prompt = a->session->begin_prefill(job->blocks);
  } catch (const InvalidArgument& e) {
    job->sink({JobEvent::Kind::Error, {}, {}, {}, 0, 400, e.what()});
    return;
  } catch (const std::exception& e) {
    job->sink({JobEvent::Kind::Error, {}, {}, {}, 0, 500, e.what()});
    return;
  }
  admitting_ = std::move(a);
}

void Scheduler::prompt_chunk() {
  Admitting& a = *admitting_;
  if (a.job->cancel.load()) {  // the client left mid-prefill: what finished chunks stored stays cached
    metrics_.cancelled();
    a.job->sink({JobEvent::Kind::Done, {}, {}, "cancelled"});
    admitting_.reset();
    return;
  }
  const int64_t before = a.prompt->remaining_tokens();
  bool more = false;
  try {
    more = a.prompt->step(opt_.prefill_chunk);
  } catch (const std::exception& e) {
    a.job->sink({JobEvent::Kind::Error, {}, {}, {}, 0, 500, e.what()});
    admitting_.reset();
    return;
  }
  const int64_t ran = before - a.prompt->remaining_tokens();
  metrics_.prefill_chunk(ran);
  if (!running_.empty()) stalled_ = true;
  if (opt_.on_step) opt_.on_step({EngineStep::Kind::PromptChunk, a.job.get(), ran, a.prompt->remaining_tokens()});
  if (more) return;
  std::unique_ptr<Admitting> done = std::move(admitting_);
  start_generation(*done);
}

void Scheduler::start_generation(Admitting& a) {
  const std::shared_ptr<Job>& job = a.job;
  Running r;
  r.job = job;
  r.session = std::move(a.session);
  PromptResult pr;
  try {
    pr = r.session->end_prefill(*a.prompt);
  } catch (const std::exception& e) {
    job->sink({JobEvent::Kind::Error, {}, {}, {}, 0, 500, e.what()});
    return;
  }
  const double queue_s = a.queue_s;
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
  opt.sampling.top_k = job->sampling.top_k;
  opt.logprobs = job->sampling.logprobs;
  opt.logit_bias = job->sampling.logit_bias;
  opt.presence_penalty = job->sampling.presence_penalty;
  opt.frequency_penalty = job->sampling.frequency_penalty;
  opt.repetition_penalty = job->sampling.repetition_penalty;
  opt.min_tokens = job->sampling.min_tokens;
  opt.stop_token_ids = job->sampling.stop_token_ids;
  opt.cancel = &job->cancel;
  Job* raw = job.get();
  opt.on_text = [raw](std::string_view t) {
    JobEvent ev{JobEvent::Kind::Text, {}, std::string(t)};
    ev.logprobs = std::move(raw->pending_logprobs);
    raw->pending_logprobs.clear();
    raw->sink(std::move(ev));
  };
  if (opt.logprobs >= 0) opt.on_logprob = [raw](const sdk::TokenLogprob& lp) { raw->pending_logprobs.push_back(lp); };
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
      JobEvent done{JobEvent::Kind::Done, {}, {}, "length", static_cast<int64_t>(r.steps->result().tokens.size())};
      done.logprobs = std::move(r.job->pending_logprobs);
      r.job->sink(std::move(done));
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
    JobEvent done{JobEvent::Kind::Done, {}, {}, finish, static_cast<int64_t>(g.tokens.size())};
    done.logprobs = std::move(r.job->pending_logprobs);
    r.job->sink(std::move(done));
    // The session (its state, K/V and all) is freed here.
  }
  running_ = std::move(still);
  running_count_ = running_.size();
  if (batch.empty()) {
    last_decode_.reset();
    stalled_ = false;
    return;
  }
  // The running generations waited for the prompt chunk run since the last decode step.
  if (stalled_ && last_decode_) metrics_.decode_stall(seconds_since(*last_decode_));
  stalled_ = false;
  try {
    sdk::Session::run_sampled(batch);
  } catch (const std::exception& e) {
    // A failed pass (out of context, a device error) ends every generation in it.
    for (auto& r : running_) r.job->sink({JobEvent::Kind::Error, {}, {}, {}, 0, 500, e.what()});
    running_.clear();
    running_count_ = 0;
    last_decode_.reset();
    return;
  }
  const auto now = Clock::now();
  last_decode_ = now;
  for (Running& r : running_) {
    metrics_.inter_token(std::chrono::duration<double>(now - r.last_token).count());
    r.last_token = now;
  }
  if (opt_.on_step) opt_.on_step({EngineStep::Kind::Decode, nullptr, static_cast<int64_t>(batch.size()), 0});
}

}  // namespace hypic::serve
