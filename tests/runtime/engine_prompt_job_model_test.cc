// A prompt run in steps (Engine::begin, PromptJob) on the CPU fixture models: for every mode and several
// token budgets (1 token included), a sequence of prompts with misses, hits in a new order, a repeated
// block, exact-prefix reuse and an extended live sequence gives the logits, counts and continuing state of
// the same prompts run in one pass; entries stored by finished steps stay valid when a job is dropped; a
// refused prompt leaves a live sequence intact.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "runtime/backends.h"
#include "runtime/engine.h"
#include "runtime/error.h"
#include "tests/runtime/token_blocks.h"

namespace hypic {
namespace {

using testing_util::block;

const std::string kModels = std::string(HYPIC_SOURCE_DIR) + "/tests/fixtures/models/";

// The largest difference relative to the largest |logit| of `b`. A step continues the state exactly as
// a forward of the rest would, but the CPU backend's linear attention rounds a sequence run in two
// calls a little differently from one call (chunk boundaries of its recurrence): that, not the stepping,
// is why results are compared within 1e-5 of the logit scale and not bit for bit (the test
// FullModeStepsAreForwardsOfTheChunks shows the steps bit-equal to forwards of the same chunks).
float max_diff(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size() || b.empty()) return std::numeric_limits<float>::infinity();
  float m = 0, scale = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    m = std::max(m, std::fabs(a[i] - b[i]));
    scale = std::max(scale, std::fabs(b[i]));
  }
  return m / std::max(scale, 1.0f);
}
constexpr float kTolerance = 1e-5f;

int hits(const PromptResult& r) {
  int h = 0;
  for (const BlockOutcome& o : r.blocks) h += o.hit;
  return h;
}

// Runs a prompt in steps of `budget` tokens, checking the job's progress on the way.
PromptResult run_in_steps(Engine& eng, const std::vector<PromptBlock>& blocks, int64_t budget,
                          LiveSequence* live = nullptr) {
  std::unique_ptr<PromptJob> job = eng.begin(blocks, live);
  const int64_t total = job->total_tokens();
  int64_t left = job->remaining_tokens();
  EXPECT_EQ(left, total);
  while (job->step(budget)) {
    EXPECT_LT(job->remaining_tokens(), left) << "a step ran nothing";
    left = job->remaining_tokens();
    EXPECT_FALSE(job->done());
  }
  EXPECT_TRUE(job->done());
  EXPECT_EQ(job->remaining_tokens(), 0);
  EXPECT_GE(job->steps(), 1);
  PromptResult r = job->finish();
  EXPECT_EQ(r.computed_tokens, total);
  EXPECT_THROW(job->finish(), InvalidArgument);
  return r;
}

struct Case {
  const char* model;
  CacheMode mode;
};

class PromptJobs : public ::testing::TestWithParam<Case> {};

TEST_P(PromptJobs, StepsGiveTheOnePassResult) {
  std::unique_ptr<Backend> b = open_backend(kModels + GetParam().model, Device::Cpu);
  const CacheMode mode = GetParam().mode;
  const std::vector<int> sys = block(20, 1), d1 = block(24, 2), d2 = block(18, 3), d3 = block(30, 4),
                         d4 = block(11, 5), q1 = block(5, 6), q2 = block(3, 7), more = block(9, 8);
  const std::vector<std::vector<PromptBlock>> prompts = {
      cacheable_blocks({sys, d1, d2, q1}),      // all misses
      cacheable_blocks({sys, d2, d3, d1, q2}),  // hits in a new order and a miss
      cacheable_blocks({sys, d4, d4, q1}),      // a block twice
      cacheable_blocks({sys, d1, d2, q2}),      // the first prompt's blocks again: an exact prefix
  };
  for (int64_t budget : {int64_t{1}, int64_t{7}, int64_t{16}}) {
    SCOPED_TRACE("budget " + std::to_string(budget));
    Engine one_pass(*b, mode, {});
    Engine stepped(*b, mode, {});
    for (size_t i = 0; i < prompts.size(); ++i) {
      SCOPED_TRACE("prompt " + std::to_string(i));
      PromptResult ref = one_pass.run(prompts[i]);
      PromptResult got = run_in_steps(stepped, prompts[i], budget);
      EXPECT_LE(max_diff(got.logits, ref.logits), kTolerance);
      EXPECT_EQ(got.computed_tokens, ref.computed_tokens);
      EXPECT_EQ(got.reused_tokens, ref.reused_tokens);
      EXPECT_EQ(got.prompt_tokens, ref.prompt_tokens);
      EXPECT_EQ(hits(got), hits(ref));
      ASSERT_EQ(got.state->length, ref.state->length);
      // The states continue alike (their K/V rows and linear states are the same).
      const int next[2] = {33, 71};
      EXPECT_LE(max_diff(stepped.forward(next, *got.state), one_pass.forward(next, *ref.state)), kTolerance);
    }
    if (mode != CacheMode::Full) {
      EXPECT_GT(hits(one_pass.run(prompts[3])), 0);  // the comparison above covered reuse
    }

    // A live sequence extended by a new block and a query: only the new tokens run.
    const std::vector<PromptBlock> first = cacheable_blocks({sys, d1, q1});
    const std::vector<PromptBlock> longer = cacheable_blocks({sys, d1, q1, more, q2});
    PromptResult ref0 = one_pass.run(first);
    PromptResult got0 = run_in_steps(stepped, first, budget);
    LiveSequence ref_live{std::move(ref0.state), prompt_tokens(first)};
    LiveSequence got_live{std::move(got0.state), prompt_tokens(first)};
    PromptResult ref = one_pass.run(longer, &ref_live);
    PromptResult got = run_in_steps(stepped, longer, budget, &got_live);
    EXPECT_LE(max_diff(got.logits, ref.logits), kTolerance);
    EXPECT_EQ(got.computed_tokens, ref.computed_tokens);
    if (mode != CacheMode::Full) {
      EXPECT_EQ(got.computed_tokens, static_cast<int64_t>(more.size() + q2.size()));
    }
  }
}

TEST_P(PromptJobs, BudgetBoundsEachStep) {
  std::unique_ptr<Backend> b = open_backend(kModels + GetParam().model, Device::Cpu);
  Engine eng(*b, GetParam().mode, {});
  // Every block is small next to the budget, so each step but the last runs the whole budget.
  const std::vector<PromptBlock> prompt = cacheable_blocks({block(6, 1), block(5, 2), block(7, 3), block(4, 4)});
  std::unique_ptr<PromptJob> job = eng.begin(prompt);
  const int64_t total = job->total_tokens();
  EXPECT_THROW(job->step(0), InvalidArgument);
  while (!job->done()) {
    const int64_t before = job->remaining_tokens();
    job->step(8);
    EXPECT_LE(before - job->remaining_tokens(), 8);
    EXPECT_GT(before - job->remaining_tokens(), 0);
  }
  // Rows of one sequence fill every step; isolated prefills are whole, so a step may end below the budget.
  const CacheMode m = GetParam().mode;
  if (m == CacheMode::Full || m == CacheMode::Prefix) {
    EXPECT_EQ(job->steps(), (total + 7) / 8);
  }
  EXPECT_FALSE(job->step(8));
}

// In full mode a step is a forward of its chunk: the same calls, so the same bits.
TEST(PromptJob, FullModeStepsAreForwardsOfTheChunks) {
  std::unique_ptr<Backend> b = open_backend(kModels + "qwen3_next_moe", Device::Cpu);
  Engine eng(*b, CacheMode::Full, {});
  const std::vector<int> all = block(67, 3);
  for (int64_t budget : {1, 7, 16, 33}) {
    std::unique_ptr<State> st = b->new_state();
    std::vector<float> want;
    for (size_t i = 0; i < all.size(); i += static_cast<size_t>(budget)) {
      const size_t n = std::min(all.size() - i, static_cast<size_t>(budget));
      want = eng.forward(std::span<const int>(all).subspan(i, n), *st, /*all_logits=*/true);
      want.erase(want.begin(), want.end() - b->config().vocab_size);
    }
    const PromptResult got = run_in_steps(eng, cacheable_blocks({all}), budget);
    EXPECT_EQ(got.logits, want) << "budget " << budget;
  }
}

TEST_P(PromptJobs, DroppedJobLeavesValidEntries) {
  std::unique_ptr<Backend> b = open_backend(kModels + GetParam().model, Device::Cpu);
  const CacheMode mode = GetParam().mode;
  const std::vector<PromptBlock> prompt = cacheable_blocks({block(20, 1), block(24, 2), block(18, 3), block(5, 4)});
  Engine ref_eng(*b, mode, {});
  const PromptResult ref = ref_eng.run(prompt);
  Engine eng(*b, mode, {});
  {
    std::unique_ptr<PromptJob> job = eng.begin(prompt);
    job->step(30);  // some of the prompt: a client that left mid-prefill
    job->step(30);
    ASSERT_FALSE(job->done());
  }
  // What the dropped job stored serves the same prompt, and the result is still the one-pass one.
  const PromptResult again = eng.run(prompt);
  EXPECT_LE(max_diff(again.logits, ref.logits), kTolerance);
  if (mode == CacheMode::Hypic) {
    EXPECT_GT(hits(again), 0);
  }
  if (mode == CacheMode::Prefix) {
    EXPECT_GT(again.reused_tokens, 0);
  }
}

TEST_P(PromptJobs, RefusedPromptLeavesLiveSequence) {
  std::unique_ptr<Backend> b = open_backend(kModels + GetParam().model, Device::Cpu);
  Engine eng(*b, GetParam().mode, {});
  const std::vector<PromptBlock> first = cacheable_blocks({block(10, 1), block(4, 2)});
  PromptResult r = eng.run(first);
  LiveSequence live{std::move(r.state), prompt_tokens(first)};
  std::vector<PromptBlock> bad = cacheable_blocks({block(10, 1), block(4, 2), {-3, 5}});
  EXPECT_THROW(eng.begin(bad, &live), InvalidArgument);
  ASSERT_NE(live.state, nullptr);
  EXPECT_EQ(live.state->length, 14);
  const int64_t max_positions = b->config().max_positions;
  ASSERT_GT(max_positions, 0);
  std::vector<PromptBlock> too_long = cacheable_blocks({block(10, 1), block(4, 2)});
  too_long.back().tokens.assign(static_cast<size_t>(max_positions), 7);
  EXPECT_THROW(eng.begin(too_long, &live), Error);
  ASSERT_NE(live.state, nullptr);
  EXPECT_EQ(live.state->length, 14);
}

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  return std::string(info.param.model) + "_" + mode_name(info.param.mode);
}

INSTANTIATE_TEST_SUITE_P(
    Fixtures, PromptJobs,
    ::testing::Values(Case{"qwen3_next_moe", CacheMode::Full}, Case{"qwen3_next_moe", CacheMode::Prefix},
                      Case{"qwen3_next_moe", CacheMode::Hypic}, Case{"qwen3_next_moe", CacheMode::Naive},
                      Case{"qwen3_next_moe", CacheMode::NoSeam}, Case{"qwen3_5_dense", CacheMode::Full},
                      Case{"qwen3_5_dense", CacheMode::Prefix}, Case{"qwen3_5_dense", CacheMode::Hypic}),
    case_name);

}  // namespace
}  // namespace hypic
