// Generations decoded together (Session::run_sampled over several sessions, as `hypic serve` runs them)
// give every session the tokens it gets alone with Session::generate, greedy and sampled, on every device
// (the CPU always, CUDA where built and present): the batched step draws each next token where the logits
// are, from the same uniform draws. A generation cancelled after such a step leaves no logits to sample
// from: the next generate() says so, and appending text recovers.
// A prefill in steps (Session::begin_prefill / end_prefill, as hypic serve admits prompts in chunks):
// a conversation's next turn run in small steps continues the live state as prefill() does; a refused
// prompt leaves the conversation as it was; a dropped job leaves an empty session that works.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>

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
    std::vector<std::unique_ptr<Session>> sessions;
    std::vector<std::unique_ptr<GenerationSteps>> steps;
    for (size_t i = 0; i < prompts_.size(); ++i) {
      sessions.push_back(std::make_unique<Session>(*rt_));
      sessions.back()->append_text(prompts_[i]);
      // Different lengths: the last generation stops early, so the batch shrinks on the way.
      GenerateOptions opt = options(temperature, 11 + i);
      if (i + 1 == prompts_.size()) opt.max_tokens = 5;
      steps.push_back(std::make_unique<GenerationSteps>(*sessions.back(), opt));
    }
    for (;;) {
      std::vector<Session*> batch;
      for (size_t i = 0; i < steps.size(); ++i)
        if (steps[i]->step()) batch.push_back(sessions[i].get());
      if (batch.empty()) break;
      Session::run_sampled(batch);
    }
    for (size_t i = 0; i < prompts_.size(); ++i) {
      std::vector<int> want = alone[i];
      if (i + 1 == prompts_.size()) want.resize(5);
      EXPECT_EQ(steps[i]->result().tokens, want) << GetParam() << " temperature " << temperature << " session " << i;
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

INSTANTIATE_TEST_SUITE_P(Devices, SessionBatch, ::testing::Values("cpu", "cuda"),
                         [](const auto& info) { return info.param; });

std::unique_ptr<Runtime> open_tiny() {
  RuntimeOptions o;
  o.model_dir = std::string(HYPIC_SOURCE_DIR) + "/examples/models/hypic-qa-tiny";
  o.device = "cpu";
  return Runtime::open(o);
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
