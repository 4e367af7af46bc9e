// Session::begin_prefill / end_prefill (a prefill in steps, as hypic serve runs it) on the shipped QA
// model: a conversation's next turn run in small steps continues the live state as prefill() does; a
// refused prompt leaves the conversation as it was; a dropped job leaves an empty session that works.
#include <gtest/gtest.h>

#include <cmath>

#include "runtime/error.h"
#include "sdk/session.h"

namespace hypic::sdk {
namespace {

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
