// Generations decoded together (Session::run_sampled over several sessions, as `hypic serve` runs them)
// give every session the tokens it gets alone with Session::generate, greedy and sampled, on every device
// (the CPU always, CUDA where built and present): the batched step draws each next token where the logits
// are, from the same uniform draws. A generation cancelled after such a step leaves no logits to sample
// from: the next generate() says so, and appending text recovers.
#include <gtest/gtest.h>

#include <atomic>

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

}  // namespace
}  // namespace hypic::sdk
