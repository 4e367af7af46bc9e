// Generations decoded together (Session::run_sampled over several sessions, as `hypic serve` runs them)
// give every session the tokens it gets alone with Session::generate, greedy and sampled, on every device
// (the CPU always, CUDA where built and present): the batched step draws each next token where the logits
// are, from the same uniform draws. A generation cancelled after such a step leaves no logits to sample
// from: the next generate() says so, and appending text recovers.
// Token controls: logprobs are the log-softmax of the model's rows (checked against the engine's own rows),
// a logit bias and presence / frequency penalties follow OpenAI's definitions, and generations using them
// batch with others.
// A prefill in steps (Session::begin_prefill / end_prefill, as hypic serve admits prompts in chunks):
// a conversation's next turn run in small steps continues the live state as prefill() does; a refused
// prompt leaves the conversation as it was; a dropped job leaves an empty session that works.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <functional>

#include "runtime/backends.h"
#include "runtime/error.h"
#include "sdk/session.h"

namespace hypic::sdk {
namespace {

const std::string kRoot = HYPIC_SOURCE_DIR;

class SessionBatch : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (GetParam() == "cuda" && !(cuda_built() && cuda_device_present())) GTEST_SKIP() << "no CUDA backend or device";
    RuntimeOptions o;
    o.model_dir = kRoot + "/examples/models/hypic-qa-tiny";
    o.device = GetParam();
    o.mode = CacheMode::Full;
    rt_ = Runtime::open(o);
  }
  // Every prompt's generation under opts(i), decoded together one batched step at a time (as hypic serve
  // runs them); the batch shrinks as generations end.
  std::vector<Generation> run_batched(const std::function<GenerateOptions(size_t)>& opts) {
    std::vector<std::unique_ptr<Session>> sessions;
    std::vector<std::unique_ptr<GenerationSteps>> steps;
    for (size_t i = 0; i < prompts_.size(); ++i) {
      sessions.push_back(std::make_unique<Session>(*rt_));
      sessions.back()->append_text(prompts_[i]);
      steps.push_back(std::make_unique<GenerationSteps>(*sessions.back(), opts(i)));
    }
    for (;;) {
      std::vector<Session*> batch;
      for (size_t i = 0; i < steps.size(); ++i)
        if (steps[i]->step()) batch.push_back(sessions[i].get());
      if (batch.empty()) break;
      Session::run_sampled(batch);
    }
    std::vector<Generation> out;
    for (auto& st : steps) out.push_back(st->result());
    return out;
  }
  std::unique_ptr<Runtime> rt_;
  const std::vector<std::string> prompts_ = {"The badge of Kaimur is 8313. What is the badge of Kaimur?",
                                             "Soujol lives in Thunest.", "The gate of Draje is",
                                             "Where does Soujol live? The key of Daplou is 1568."};
};

GenerateOptions options(float temperature, uint64_t seed) {
  GenerateOptions opt;
  opt.max_tokens = 12;
  opt.sampling.temperature = temperature;
  opt.sampling.top_p = 0.9f;
  opt.seed = seed;
  opt.ignore_eos = true;
  return opt;
}

TEST_P(SessionBatch, BatchedGenerationsEqualEachAlone) {
  for (const float temperature : {0.0f, 0.9f}) {
    std::vector<std::vector<int>> alone;
    for (size_t i = 0; i < prompts_.size(); ++i) {
      Session s(*rt_);
      s.append_text(prompts_[i]);
      alone.push_back(s.generate(options(temperature, 11 + i)).tokens);
    }
    // Different lengths: the last generation stops early, so the batch shrinks on the way.
    const std::vector<Generation> batched = run_batched([&](size_t i) {
      GenerateOptions opt = options(temperature, 11 + i);
      if (i + 1 == prompts_.size()) opt.max_tokens = 5;
      return opt;
    });
    for (size_t i = 0; i < prompts_.size(); ++i) {
      std::vector<int> want = alone[i];
      if (i + 1 == prompts_.size()) want.resize(5);
      EXPECT_EQ(batched[i].tokens, want) << GetParam() << " temperature " << temperature << " session " << i;
    }
  }
}

TEST_P(SessionBatch, CancelledAfterABatchedDrawNeedsNewTextBeforeGenerating) {
  Session a(*rt_), b(*rt_);
  a.append_text(prompts_[0]);
  b.append_text(prompts_[1]);
  std::atomic<bool> cancel{false};
  GenerateOptions opt = options(0.0f, 1);
  opt.cancel = &cancel;
  GenerationSteps sa(a, opt), sb(b, options(0.0f, 2));
  ASSERT_TRUE(sa.step());
  ASSERT_TRUE(sb.step());
  Session* both[2] = {&a, &b};
  Session::run_sampled(both);  // a's next token is drawn with the step: its logits are not kept
  cancel = true;
  EXPECT_FALSE(sa.step());
  EXPECT_EQ(sa.result().finish, Generation::Finish::Cancelled);
  EXPECT_THROW(a.generate(options(0.0f, 1)), InvalidArgument);
  a.append_text(" More.");
  EXPECT_EQ(a.generate(options(0.0f, 1)).tokens.size(), 12u);
}

// Generations with token controls (logprobs, a logit bias, penalties) draw on the host from the logits the
// batched run returns for them, beside generations drawn on the device: each still gets what it gets alone.
TEST_P(SessionBatch, TokenControlsInABatchEqualEachAlone) {
  auto controlled = [](size_t i) {
    GenerateOptions opt = options(i % 2 ? 0.0f : 0.9f, 21 + i);
    if (i % 2 == 0) {
      opt.logprobs = 2;
      opt.frequency_penalty = 0.7f;
      opt.logit_bias = {{17, 3.0f}};
    }
    return opt;
  };
  std::vector<Generation> alone;
  for (size_t i = 0; i < prompts_.size(); ++i) {
    Session s(*rt_);
    s.append_text(prompts_[i]);
    alone.push_back(s.generate(controlled(i)));
  }
  const std::vector<Generation> batched = run_batched(controlled);
  for (size_t i = 0; i < prompts_.size(); ++i) {
    const Generation& g = batched[i];
    EXPECT_EQ(g.tokens, alone[i].tokens) << GetParam() << " session " << i;
    ASSERT_EQ(g.logprobs.size(), alone[i].logprobs.size()) << GetParam() << " session " << i;
    EXPECT_EQ(g.logprobs.size(), i % 2 ? 0u : g.tokens.size());
    // CUDA's batched step runs other kernels than a lone step (bf16 sums in another order): its logits, and so
    // the logprobs, agree to bf16 precision (0.014 seen on an H100), the tokens exactly.
    const double tol = GetParam() == "cpu" ? 1e-4 : 0.05;
    for (size_t k = 0; k < g.logprobs.size(); ++k) {
      EXPECT_EQ(g.logprobs[k].id, g.tokens[k]);
      EXPECT_NEAR(g.logprobs[k].logprob, alone[i].logprobs[k].logprob, tol) << GetParam() << " session " << i;
      EXPECT_EQ(g.logprobs[k].top.size(), 2u);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Devices, SessionBatch, ::testing::Values("cpu", "cuda"),
                         [](const auto& info) { return info.param; });

std::unique_ptr<Runtime> open_tiny() {
  RuntimeOptions o;
  o.model_dir = std::string(HYPIC_SOURCE_DIR) + "/examples/models/hypic-qa-tiny";
  o.device = "cpu";
  return Runtime::open(o);
}

// The rows the model gives a prompt and then each generated token but the last, from the engine directly
// (not through the session): the reference the token controls are checked against.
std::vector<std::vector<float>> reference_rows(Runtime& rt, const std::string& prompt, const std::vector<int>& gen) {
  const int64_t V = rt.config().vocab_size;
  PromptResult pr = rt.engine().run(std::vector<std::vector<int>>{rt.tokenizer().encode(prompt)});
  std::vector<std::vector<float>> rows = {pr.logits};
  if (gen.size() > 1) {
    const std::vector<int> forced(gen.begin(), gen.end() - 1);
    const std::vector<float> all = rt.engine().forward(forced, *pr.state, /*all_logits=*/true);
    for (size_t k = 0; k < forced.size(); ++k) rows.emplace_back(all.begin() + k * V, all.begin() + (k + 1) * V);
  }
  return rows;
}

GenerateOptions greedy(int n) {
  GenerateOptions opt;
  opt.max_tokens = n;
  opt.ignore_eos = true;
  return opt;
}

// The ids a generation may sample: the LM head's rows that the tokenizer has tokens for.
int64_t sampled_ids(Runtime& rt) {
  return std::min<int64_t>(rt.config().vocab_size, static_cast<int64_t>(rt.tokenizer().vocab_size()));
}

// A fresh session's reply to `prompt` under `opt`.
std::vector<int> reply(Runtime& rt, const std::string& prompt, const GenerateOptions& opt) {
  Session s(rt);
  s.append_text(prompt);
  return s.generate(opt).tokens;
}

// The first id of the largest adjust(j, row[j]) over ids [0, n).
int argmax_adjusted(const std::vector<float>& row, int64_t n, const std::function<float(int64_t, float)>& adjust) {
  int best = 0;
  float best_v = -INFINITY;
  for (int64_t j = 0; j < n; ++j) {
    const float v = adjust(j, row[j]);
    if (v > best_v) best_v = v, best = static_cast<int>(j);
  }
  return best;
}

// Each token's logprob is the log-softmax of the model's row at that token, and the alternatives are the
// row's most likely ids, most likely first.
TEST(TokenControls, LogprobsAreTheRowsLogSoftmax) {
  auto rt = open_tiny();
  const std::string prompt = "The badge of Kaimur is 8313. What is the badge of Kaimur?";
  const int64_t n = sampled_ids(*rt);
  for (const float temperature : {0.0f, 1.0f}) {
    Session s(*rt);
    s.append_text(prompt);
    GenerateOptions opt = greedy(8);
    opt.sampling.temperature = temperature;
    opt.seed = 5;
    opt.logprobs = 3;
    std::vector<int> streamed;
    opt.on_logprob = [&](const TokenLogprob& lp) { streamed.push_back(lp.id); };
    const Generation g = s.generate(opt);
    ASSERT_EQ(g.logprobs.size(), g.tokens.size());
    EXPECT_EQ(streamed, g.tokens);
    const auto rows = reference_rows(*rt, prompt, g.tokens);
    for (size_t k = 0; k < g.tokens.size(); ++k) {
      const std::vector<float>& row = rows[k];
      double mx = row[0], sum = 0;
      for (int64_t j = 1; j < n; ++j) mx = std::max<double>(mx, row[j]);
      for (int64_t j = 0; j < n; ++j) sum += std::exp(row[j] - mx);
      const double lse = mx + std::log(sum);
      const TokenLogprob& lp = g.logprobs[k];
      EXPECT_EQ(lp.id, g.tokens[k]);
      EXPECT_NEAR(lp.logprob, row[lp.id] - lse, 1e-4) << "token " << k;
      EXPECT_LE(lp.logprob, 0.0f);
      ASSERT_EQ(lp.top.size(), 3u);
      std::vector<int> order(static_cast<size_t>(n));
      for (int64_t j = 0; j < n; ++j) order[j] = static_cast<int>(j);
      std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return row[a] > row[b]; });
      for (int t = 0; t < 3; ++t) {
        EXPECT_EQ(lp.top[t].first, order[t]) << "token " << k << " alternative " << t;
        EXPECT_NEAR(lp.top[t].second, row[order[t]] - lse, 1e-4);
      }
      if (temperature == 0.0f) EXPECT_EQ(lp.top[0].first, lp.id);
    }
  }
}

// A bias of +100 makes an id the only greedy choice; -100 takes the greedy token away.
TEST(TokenControls, LogitBiasMovesTheChoice) {
  auto rt = open_tiny();
  const std::string prompt = "Soujol lives in Thunest.";
  Session plain(*rt);
  plain.append_text(prompt);
  const std::vector<int> base = plain.generate(greedy(4)).tokens;

  Session forced(*rt);
  forced.append_text(prompt);
  GenerateOptions opt = greedy(4);
  opt.logit_bias = {{37, 100.0f}};
  EXPECT_EQ(forced.generate(opt).tokens, std::vector<int>(4, 37));

  Session banned(*rt);
  banned.append_text(prompt);
  opt.logit_bias = {{base[0], -100.0f}};
  EXPECT_NE(banned.generate(opt).tokens[0], base[0]);

  Session bad(*rt);
  bad.append_text(prompt);
  opt.logit_bias = {{static_cast<int>(rt->config().vocab_size), 1.0f}};
  EXPECT_THROW(bad.generate(opt), InvalidArgument);
  opt.logit_bias.clear();
  opt.logprobs = kMaxTopLogprobs + 1;
  EXPECT_THROW(bad.generate(opt), InvalidArgument);
}

// Greedy under presence and frequency penalties takes, at every step, the argmax of the model's row less
// frequency * count + presence * (count > 0) over the tokens generated before it; each penalty alone
// changes a generation that repeats tokens.
TEST(TokenControls, PenaltiesFollowTheirDefinition) {
  auto rt = open_tiny();
  const std::string prompt = "The gate of Draje is";
  const int64_t n = sampled_ids(*rt);
  const std::vector<int> plain = reply(*rt, prompt, greedy(16));
  std::vector<int> plain_count(static_cast<size_t>(n), 0);
  int plain_most = 0;
  for (int t : plain) plain_most = std::max(plain_most, ++plain_count[t]);
  ASSERT_GT(plain_most, 1) << "the plain greedy reply repeats a token (else the penalties cannot show)";

  for (const auto& [presence, frequency] : {std::pair{2.0f, 0.0f}, {0.0f, 2.0f}, {0.5f, -1.0f}}) {
    GenerateOptions opt = greedy(16);
    opt.presence_penalty = presence;
    opt.frequency_penalty = frequency;
    const std::vector<int> gen = reply(*rt, prompt, opt);
    const auto rows = reference_rows(*rt, prompt, gen);
    std::vector<int> count(static_cast<size_t>(n), 0);
    for (size_t k = 0; k < gen.size(); ++k) {
      const int best = argmax_adjusted(rows[k], n, [&, p = presence, f = frequency](int64_t j, float x) {
        return count[j] > 0 ? x - (f * count[j] + p) : x;
      });
      EXPECT_EQ(gen[k], best) << "presence " << presence << " frequency " << frequency << " token " << k;
      ++count[gen[k]];
    }
    if (frequency >= 0) EXPECT_NE(gen, plain) << "presence " << presence << " frequency " << frequency;
  }
}

// repetition_penalty divides the positive and multiplies the negative logits of every id seen so far, the
// prompt's included: greedy takes the argmax of that row at every step.
TEST(TokenControls, RepetitionPenaltyCoversThePromptAndTheReply) {
  auto rt = open_tiny();
  const std::string prompt = "The gate of Draje is";
  const int64_t n = sampled_ids(*rt);
  const std::vector<int> plain = reply(*rt, prompt, greedy(16));
  for (const float r : {1.8f, 0.7f}) {
    GenerateOptions opt = greedy(16);
    opt.repetition_penalty = r;
    const std::vector<int> gen = reply(*rt, prompt, opt);
    const auto rows = reference_rows(*rt, prompt, gen);
    std::vector<uint8_t> seen(static_cast<size_t>(n), 0);
    for (int id : rt->tokenizer().encode(prompt)) seen[id] = 1;
    for (size_t k = 0; k < gen.size(); ++k) {
      const int best = argmax_adjusted(rows[k], n, [&](int64_t j, float x) {
        return seen[j] ? (x > 0 ? x / r : x * r) : x;
      });
      EXPECT_EQ(gen[k], best) << "repetition_penalty " << r << " token " << k;
      seen[gen[k]] = 1;
    }
    EXPECT_NE(gen, plain) << "repetition_penalty " << r;
  }
  GenerateOptions opt = greedy(2);
  opt.repetition_penalty = 0.0f;
  EXPECT_THROW(reply(*rt, prompt, opt), InvalidArgument);
}

// min_tokens keeps the end-of-turn token (and any stop_token_ids id) out of the reply until it has that
// many tokens; stop_token_ids end a reply at their first occurrence, ignore_eos or not.
TEST(TokenControls, MinTokensAndStopTokenIds) {
  auto rt = open_tiny();
  const std::string prompt = "The badge of Kaimur is 8313. What is the badge of Kaimur?";
  GenerateOptions opt;
  opt.max_tokens = 24;
  Session s0(*rt);
  s0.append_text(prompt);
  const Generation g0 = s0.generate(opt);
  ASSERT_EQ(g0.finish, Generation::Finish::Stop) << "the fixture's greedy reply ends with an end-of-turn token";
  const auto& stops = rt->stop_ids();
  const size_t first_stop = g0.tokens.size();
  opt.min_tokens = static_cast<int>(first_stop) + 3;
  const std::vector<int> longer = reply(*rt, prompt, opt);
  ASSERT_GE(longer.size(), static_cast<size_t>(opt.min_tokens));
  for (int k = 0; k < opt.min_tokens; ++k)
    EXPECT_EQ(std::find(stops.begin(), stops.end(), longer[k]), stops.end()) << "token " << k;
  EXPECT_EQ(std::vector<int>(longer.begin(), longer.begin() + first_stop - 1),
            std::vector<int>(g0.tokens.begin(), g0.tokens.end() - 1))
      << "before the end-of-turn token the reply is the same";

  const std::vector<int> free = reply(*rt, prompt, greedy(12));
  GenerateOptions stop_at = greedy(12);
  stop_at.stop_token_ids = {free[3]};
  Session s1(*rt);
  s1.append_text(prompt);
  const Generation g1 = s1.generate(stop_at);
  EXPECT_EQ(g1.finish, Generation::Finish::Stop);
  const size_t at = std::find(free.begin(), free.end(), free[3]) - free.begin();
  EXPECT_EQ(g1.tokens, std::vector<int>(free.begin(), free.begin() + at + 1));

  GenerateOptions bad = greedy(2);
  bad.stop_token_ids = {-1};
  EXPECT_THROW(reply(*rt, prompt, bad), InvalidArgument);
  bad.stop_token_ids.clear();
  bad.min_tokens = -1;
  EXPECT_THROW(reply(*rt, prompt, bad), InvalidArgument);
}

std::vector<PromptBlock> turn(Runtime& rt, const std::vector<int>& before, const std::string& text) {
  std::vector<PromptBlock> blocks;
  if (!before.empty()) blocks.push_back({before, BlockCache::None});
  blocks.push_back({rt.tokenizer().encode(text), BlockCache::None});
  return blocks;
}

PromptResult prefill_in_steps(Session& s, const std::vector<PromptBlock>& blocks, int64_t budget) {
  std::unique_ptr<PromptJob> job = s.begin_prefill(blocks);
  while (job->step(budget)) {
  }
  return s.end_prefill(*job);
}

float relative_diff(const std::vector<float>& a, const std::vector<float>& b) {
  float m = 0, scale = 1;
  for (size_t i = 0; i < b.size(); ++i) {
    m = std::max(m, std::fabs(a[i] - b[i]));
    scale = std::max(scale, std::fabs(b[i]));
  }
  return a.size() == b.size() ? m / scale : 1e9f;
}

TEST(SessionSteps, NextTurnInStepsContinuesTheLiveState) {
  auto rt = open_tiny();
  Session whole(*rt), stepped(*rt);
  GenerateOptions g;
  g.max_tokens = 6;
  g.ignore_eos = true;
  const auto first = turn(*rt, {}, "Soujol lives in Thunest. Where does Soujol live?");
  whole.prefill(first);
  prefill_in_steps(stepped, first, 5);
  EXPECT_EQ(stepped.generate(g).tokens, whole.generate(g).tokens);
  // The next turn extends everything both sessions ran: only its new tokens are computed.
  const auto second = turn(*rt, whole.transcript(), " And the gate of Draje?");
  ASSERT_EQ(stepped.transcript(), whole.transcript());
  const PromptResult want = whole.prefill(second);
  const PromptResult got = prefill_in_steps(stepped, second, 3);
  EXPECT_EQ(got.computed_tokens, want.computed_tokens);
  EXPECT_EQ(got.reused_tokens, want.reused_tokens);
  EXPECT_GT(got.reused_tokens, 0);
  EXPECT_LE(relative_diff(got.logits, want.logits), 1e-5f);
  EXPECT_EQ(stepped.generate(g).tokens, whole.generate(g).tokens);
}

TEST(SessionSteps, RefusedPromptLeavesTheConversation) {
  auto rt = open_tiny();
  Session s(*rt);
  s.prefill(turn(*rt, {}, "The badge of Kaimur is 8313."));
  const std::vector<int> before = s.transcript();
  const int64_t length = s.length();
  std::vector<PromptBlock> bad = turn(*rt, before, " What is the badge?");
  bad.back().tokens.push_back(-1);
  EXPECT_THROW(s.begin_prefill(bad), InvalidArgument);
  EXPECT_EQ(s.transcript(), before);
  EXPECT_EQ(s.length(), length);
  // It still continues exactly.
  const PromptResult r = prefill_in_steps(s, turn(*rt, before, " What is the badge?"), 4);
  EXPECT_EQ(r.reused_tokens, length);
}

TEST(SessionSteps, DroppedJobLeavesAnEmptySession) {
  auto rt = open_tiny();
  Session s(*rt);
  s.prefill(turn(*rt, {}, "The key of Daplou is 1568."));
  {
    std::unique_ptr<PromptJob> job = s.begin_prefill(turn(*rt, s.transcript(), " What is the key of Daplou?"));
    job->step(2);
    EXPECT_EQ(s.length(), 0);
    EXPECT_TRUE(s.transcript().empty());
  }
  GenerateOptions g;
  g.max_tokens = 2;
  EXPECT_THROW(s.generate(g), InvalidArgument);  // no prompt yet
  Session fresh(*rt);
  const auto prompt = turn(*rt, {}, "Where does Soujol live?");
  const PromptResult a = s.prefill(prompt);
  const PromptResult b = fresh.prefill(prompt);
  EXPECT_LE(relative_diff(a.logits, b.logits), 1e-5f);
  EXPECT_EQ(s.generate(g).tokens, fresh.generate(g).tokens);
}

}  // namespace
}  // namespace hypic::sdk
