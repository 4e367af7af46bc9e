// Engine::warm_up (EngineOptions::warm_up_rows) on a CPU fixture model: one throwaway pass per power-of-two
// row count from 32 up to the limit (and the limit), clamped to the model's context; nothing is stored, and
// the engine gives the same results afterwards as an engine that never warmed up.
#include <gtest/gtest.h>

#include "runtime/backends.h"
#include "runtime/engine.h"
#include "tests/runtime/token_blocks.h"

namespace hypic {
namespace {

using testing_util::block;

const std::string kModels = std::string(HYPIC_SOURCE_DIR) + "/tests/fixtures/models/";

TEST(EngineWarmUp, OnePassPerPowerOfTwoBucketNothingStored) {
  std::unique_ptr<Backend> b = open_backend(kModels + "qwen3_next_moe", Device::Cpu);
  Engine eng(*b, CacheMode::Hypic, {});
  EXPECT_EQ(eng.warm_up(20), 1);    // 20
  EXPECT_EQ(eng.warm_up(32), 1);    // 32
  EXPECT_EQ(eng.warm_up(100), 3);   // 32, 64, 100
  EXPECT_EQ(eng.warm_up(128), 3);   // 32, 64, 128
  EXPECT_EQ(eng.store().stats().entries, 0u);
  EXPECT_EQ(eng.store().stats().bytes, 0u);
  // Clamped to max_position_embeddings (4096): 32 .. 4096 is eight passes, not a pass of 100000 rows.
  ASSERT_EQ(b->config().max_positions, 4096);
  EXPECT_EQ(eng.warm_up(100000), 8);
}

TEST(EngineWarmUp, ConstructorWarmsUpAndResultsAreUnchanged) {
  std::unique_ptr<Backend> b = open_backend(kModels + "qwen3_next_moe", Device::Cpu);
  EngineOptions warm;
  warm.warm_up_rows = 64;
  Engine cold_engine(*b, CacheMode::Hypic, {});
  Engine warm_engine(*b, CacheMode::Hypic, warm);
  EXPECT_EQ(warm_engine.store().stats().entries, 0u);
  const std::vector<std::vector<int>> prompt = {block(40, 1), block(24, 2), block(5, 3)};
  const PromptResult a = cold_engine.run(prompt), c = warm_engine.run(prompt);
  EXPECT_EQ(a.logits, c.logits);
  EXPECT_EQ(a.computed_tokens, c.computed_tokens);
  // Hits afterwards are served the same way too.
  const std::vector<std::vector<int>> reordered = {block(24, 2), block(40, 1), block(5, 4)};
  EXPECT_EQ(cold_engine.run(reordered).logits, warm_engine.run(reordered).logits);
}

}  // namespace
}  // namespace hypic
