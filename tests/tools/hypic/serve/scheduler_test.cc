// hypic serve's engine thread on the shipped tiny model (CPU): a prompt is admitted in chunks of
// --prefill-chunk tokens with a decode step of the running generations between every two chunks (seen
// through the scheduler's step trace and /metrics, not timed); a client that leaves mid-prefill stops
// its prompt at the next chunk, and what finished chunks cached is reused; chunked admission answers
// exactly as whole-prompt admission.
#include <gtest/gtest.h>

#include <condition_variable>
#include <mutex>
#include <regex>

#include "tools/hypic/serve/scheduler.h"

namespace hypic::serve {
namespace {

std::unique_ptr<sdk::Runtime> open_tiny() {
  sdk::RuntimeOptions o;
  o.model_dir = std::string(HYPIC_SOURCE_DIR) + "/examples/models/hypic-qa-tiny";
  o.device = "cpu";
  o.cache_bytes = size_t{64} << 20;
  return sdk::Runtime::open(o);
}

std::vector<int> ids(int n, int seed) {
  std::vector<int> v;
  uint32_t x = 2654435761u * static_cast<uint32_t>(seed + 1);
  for (int i = 0; i < n; ++i) {
    x = x * 1664525u + 1013904223u;
    v.push_back(static_cast<int>((x >> 8) % 200) + 40);
  }
  return v;
}

// A job whose events are kept; wait() returns once it ended (Done or Error).
struct Recorded {
  std::shared_ptr<Job> job = std::make_shared<Job>();
  std::mutex mu;
  std::condition_variable cv;
  std::vector<JobEvent> events;
  std::string text;
  bool ended = false;

  Recorded(std::string tenant, std::vector<PromptBlock> blocks, int max_tokens) {
    job->tenant = std::move(tenant);
    job->blocks = std::move(blocks);
    job->sampling.max_tokens = max_tokens;
    job->sampling.temperature = 0;
    job->sampling.ignore_eos = true;
    job->sink = [this](JobEvent ev) {
      std::lock_guard<std::mutex> l(mu);
      if (ev.kind == JobEvent::Kind::Text) text += ev.text;
      ended = ended || ev.kind == JobEvent::Kind::Done || ev.kind == JobEvent::Kind::Error;
      events.push_back(std::move(ev));
      cv.notify_all();
    };
  }
  bool has(JobEvent::Kind k) {
    std::lock_guard<std::mutex> l(mu);
    for (auto& e : events)
      if (e.kind == k) return true;
    return false;
  }
  void wait_for(JobEvent::Kind k) {
    std::unique_lock<std::mutex> l(mu);
    cv.wait(l, [&] {
      for (auto& e : events)
        if (e.kind == k) return true;
      return ended;
    });
  }
  void wait() {
    std::unique_lock<std::mutex> l(mu);
    cv.wait(l, [&] { return ended; });
  }
  PromptReport prompt() {
    std::lock_guard<std::mutex> l(mu);
    for (auto& e : events)
      if (e.kind == JobEvent::Kind::Prompt) return e.prompt;
    ADD_FAILURE() << "no prompt event";
    return {};
  }
  const JobEvent& last() { return events.back(); }
};

// The engine thread's steps, as reported to SchedulerOptions::on_step.
struct Trace {
  std::mutex mu;
  std::vector<EngineStep> steps;
  std::function<void(const EngineStep&)> also;
  void operator()(const EngineStep& s) {
    {
      std::lock_guard<std::mutex> l(mu);
      steps.push_back(s);
    }
    if (also) also(s);
  }
  std::vector<EngineStep> copy() {
    std::lock_guard<std::mutex> l(mu);
    return steps;
  }
};

double metric(const Metrics& m, const std::string& name) {
  const std::string text = m.render();
  std::smatch match;
  if (!std::regex_search(text, match, std::regex("\n" + name + " ([0-9.e+-]+)\n"))) {
    ADD_FAILURE() << name << " is not in /metrics";
    return -1;
  }
  return std::stod(match[1]);
}

// A long prompt: a small cached block, a block never cached (computed under its prefix, so it runs as
// rows of the main sequence, chunk by chunk) and a query.
std::vector<PromptBlock> long_prompt(int body, int seed) {
  return {{ids(12, seed), BlockCache::Cache}, {ids(body, seed + 1), BlockCache::None}, {ids(5, seed + 2), BlockCache::None}};
}

TEST(Scheduler, ChunkedAdmissionInterleavesDecodeSteps) {
  auto rt = open_tiny();
  Metrics metrics;
  auto trace = std::make_shared<Trace>();
  SchedulerOptions opt;
  opt.max_running = 4;
  opt.prefill_chunk = 16;
  opt.on_step = [trace](const EngineStep& s) { (*trace)(s); };
  Scheduler sched(*rt, metrics, opt);

  Recorded a("t", cacheable_blocks({ids(10, 1), ids(4, 2)}), 400);
  sched.submit(a.job);
  a.wait_for(JobEvent::Kind::Prompt);
  ASSERT_TRUE(a.has(JobEvent::Kind::Prompt));
  Recorded b("t", long_prompt(150, 10), 4);
  sched.submit(b.job);
  b.wait();
  a.job->cancel = true;
  a.wait();
  sched.stop();

  ASSERT_EQ(b.last().kind, JobEvent::Kind::Done);
  const PromptReport pb = b.prompt();
  const std::vector<EngineStep> steps = trace->copy();
  // B's chunks: at most the chunk size each, all its computed tokens in all, and a decode step of A
  // between every two of them.
  int64_t b_tokens = 0, b_chunks = 0, a_chunks = 0;
  bool decode_since_b_chunk = true;
  for (const EngineStep& s : steps) {
    if (s.kind == EngineStep::Kind::Decode) {
      decode_since_b_chunk = true;
      continue;
    }
    if (s.job == a.job.get()) {
      ++a_chunks;
      continue;
    }
    ASSERT_EQ(s.job, b.job.get());
    EXPECT_LE(s.tokens, 16);
    EXPECT_GT(s.tokens, 0);
    EXPECT_TRUE(decode_since_b_chunk) << "two chunks of B without a decode step of A between them";
    decode_since_b_chunk = false;
    b_tokens += s.tokens;
    ++b_chunks;
    EXPECT_EQ(s.remaining, pb.computed_tokens - b_tokens);
  }
  EXPECT_EQ(b_tokens, pb.computed_tokens);
  EXPECT_GE(b_chunks, (150 + 5) / 16);
  // /metrics: every chunk counted, and each of B's chunks stalled A's decoding once.
  EXPECT_EQ(metric(metrics, "hypic_prefill_chunks_total"), static_cast<double>(a_chunks + b_chunks));
  EXPECT_EQ(metric(metrics, "hypic_decode_stall_seconds_count"), static_cast<double>(b_chunks));
  EXPECT_EQ(metric(metrics, "hypic_cancelled_total"), 1);
}

TEST(Scheduler, ClientLeavingMidPrefillStopsAtTheNextChunk) {
  auto rt = open_tiny();
  Metrics metrics;
  auto trace = std::make_shared<Trace>();
  SchedulerOptions opt;
  opt.prefill_chunk = 8;
  opt.on_step = [trace](const EngineStep& s) { (*trace)(s); };
  Scheduler sched(*rt, metrics, opt);

  Recorded c("t", long_prompt(200, 20), 4);
  int chunks = 0;
  // The client goes away during C's third chunk (on the engine thread, so exactly there).
  trace->also = [&](const EngineStep& s) {
    if (s.kind == EngineStep::Kind::PromptChunk && s.job == c.job.get() && ++chunks == 3) c.job->cancel = true;
  };
  sched.submit(c.job);
  c.wait();
  {
    std::lock_guard<std::mutex> l(c.mu);
    ASSERT_EQ(c.events.size(), 1u);  // no prompt report, no text
    EXPECT_EQ(c.events[0].kind, JobEvent::Kind::Done);
    EXPECT_EQ(c.events[0].finish, "cancelled");
  }
  EXPECT_EQ(chunks, 3);
  EXPECT_EQ(metric(metrics, "hypic_cancelled_total"), 1);
  EXPECT_EQ(metric(metrics, "hypic_prefill_chunks_total"), 3);

  // The server goes on, and the block C's first chunk cached is a hit for the next request.
  trace->also = nullptr;
  Recorded d("t", long_prompt(20, 20), 3);
  sched.submit(d.job);
  d.wait();
  ASSERT_EQ(d.last().kind, JobEvent::Kind::Done);
  const PromptReport pd = d.prompt();
  ASSERT_EQ(pd.blocks.size(), 2u);
  EXPECT_TRUE(pd.blocks[0].hit);
  EXPECT_FALSE(pd.blocks[1].hit);
}

// The replies and prompt reports of a few requests (misses, then the same documents in another order:
// hits) admitted with a chunk of `chunk` tokens, on a fresh runtime.
std::vector<std::pair<std::string, PromptReport>> answers(int64_t chunk) {
  auto rt = open_tiny();
  Metrics metrics;
  SchedulerOptions opt;
  opt.prefill_chunk = chunk;
  Scheduler sched(*rt, metrics, opt);
  const std::vector<int> sys = ids(14, 30), d1 = ids(40, 31), d2 = ids(33, 32), d3 = ids(27, 33);
  std::vector<std::pair<std::string, PromptReport>> out;
  for (const auto& blocks : {cacheable_blocks({sys, d1, d2, ids(6, 34)}), cacheable_blocks({sys, d2, d3, d1, ids(5, 35)}),
                             long_prompt(60, 36)}) {
    Recorded r("t", blocks, 12);
    sched.submit(r.job);
    r.wait();
    EXPECT_EQ(r.last().kind, JobEvent::Kind::Done);
    out.push_back({r.text, r.prompt()});
  }
  return out;
}

TEST(Scheduler, ChunkedAdmissionAnswersAsWholeAdmission) {
  const auto whole = answers(1 << 20);
  for (int64_t chunk : {1, 5, 64}) {
    const auto chunked = answers(chunk);
    ASSERT_EQ(chunked.size(), whole.size());
    for (size_t i = 0; i < whole.size(); ++i) {
      SCOPED_TRACE("chunk " + std::to_string(chunk) + ", request " + std::to_string(i));
      EXPECT_EQ(chunked[i].first, whole[i].first);
      EXPECT_FALSE(whole[i].first.empty());
      const PromptReport &got = chunked[i].second, &want = whole[i].second;
      EXPECT_EQ(got.computed_tokens, want.computed_tokens);
      EXPECT_EQ(got.reused_tokens, want.reused_tokens);
      ASSERT_EQ(got.blocks.size(), want.blocks.size());
      for (size_t j = 0; j < got.blocks.size(); ++j) EXPECT_EQ(got.blocks[j].hit, want.blocks[j].hit);
    }
  }
  EXPECT_TRUE(whole[1].second.blocks[1].hit);  // the second request reused the first one's documents
}

TEST(Scheduler, RefusesAChunkOfNoTokens) {
  auto rt = open_tiny();
  Metrics metrics;
  SchedulerOptions opt;
  opt.prefill_chunk = 0;
  EXPECT_THROW(Scheduler(*rt, metrics, opt), InvalidArgument);
}

}  // namespace
}  // namespace hypic::serve
