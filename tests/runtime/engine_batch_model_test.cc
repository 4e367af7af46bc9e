// The engine's serving paths on the CPU fixture models: a batched decode step (one pass, a lane per
// sequence) gives every sequence the logits its own one-token forward gives, and continues the states
// exactly; key namespaces keep requests of different tenants from reusing each other's cache entries.
#include <gtest/gtest.h>

#include <cmath>

#include "runtime/backends.h"
#include "runtime/engine.h"
#include "runtime/error.h"

namespace hypic {
namespace {

const std::string kModels = std::string(HYPIC_SOURCE_DIR) + "/tests/fixtures/models/";

std::vector<int> ids(int n, int seed) {
  std::vector<int> v;
  uint32_t x = 2654435761u * static_cast<uint32_t>(seed + 1);
  for (int i = 0; i < n; ++i) {
    x = x * 1664525u + 1013904223u;
    v.push_back(static_cast<int>((x >> 8) % 400) + 20);
  }
  return v;
}

float max_diff(const float* a, const float* b, size_t n) {
  float m = 0;
  for (size_t i = 0; i < n; ++i) m = std::max(m, std::fabs(a[i] - b[i]));
  return m;
}

class EngineBatch : public ::testing::TestWithParam<const char*> {};

TEST_P(EngineBatch, DecodeBatchMatchesOneSequenceAtATime) {
  std::unique_ptr<Backend> b = open_backend(kModels + GetParam(), Device::Cpu);
  Engine eng(*b, CacheMode::Full, {});
  const size_t V = static_cast<size_t>(b->config().vocab_size);
  // Three sequences of different lengths, each twice: one copy decoded alone, one in the batch.
  std::vector<std::unique_ptr<State>> alone, batched;
  for (int s = 0; s < 3; ++s) {
    const std::vector<int> prompt = ids(5 + 7 * s, s);
    alone.push_back(b->new_state());
    batched.push_back(b->new_state());
    eng.forward(prompt, *alone.back());
    eng.forward(prompt, *batched.back());
  }
  for (int step = 0; step < 3; ++step) {
    const std::vector<int> next = {30 + step, 77, 101 + 3 * step};
    std::vector<State*> states = {batched[0].get(), batched[1].get(), batched[2].get()};
    const std::vector<float> all = eng.decode_batch(states, next);
    ASSERT_EQ(all.size(), 3 * V);
    for (int s = 0; s < 3; ++s) {
      const int one[1] = {next[s]};
      const std::vector<float> ref = eng.forward(one, *alone[s]);
      EXPECT_LT(max_diff(all.data() + s * V, ref.data(), V), 1e-4f) << "sequence " << s << " step " << step;
      EXPECT_EQ(batched[s]->length, alone[s]->length);
    }
  }
}

TEST_P(EngineBatch, DecodeBatchRefusesBadInput) {
  std::unique_ptr<Backend> b = open_backend(kModels + GetParam(), Device::Cpu);
  Engine eng(*b, CacheMode::Full, {});
  auto st = b->new_state();
  const std::vector<int> p = ids(4, 1);
  eng.forward(p, *st);
  std::vector<State*> twice = {st.get(), st.get()};
  EXPECT_THROW(eng.decode_batch(twice, std::vector<int>{1, 2}), InvalidArgument);
  std::vector<State*> one = {st.get()};
  EXPECT_THROW(eng.decode_batch(one, std::vector<int>{1, 2}), InvalidArgument);
  EXPECT_THROW(eng.decode_batch(one, std::vector<int>{-1}), InvalidArgument);
  EXPECT_EQ(st->length, 4);  // refused before anything ran
}

TEST_P(EngineBatch, KeyNamespacesIsolateTenants) {
  std::unique_ptr<Backend> b = open_backend(kModels + GetParam(), Device::Cpu);
  Engine eng(*b, CacheMode::Hypic, {});
  const std::vector<PromptBlock> prompt = cacheable_blocks({ids(20, 1), ids(24, 2), ids(18, 3), ids(5, 4)});
  auto hits = [](const PromptResult& r) {
    int h = 0;
    for (auto& x : r.blocks) h += x.hit;
    return h;
  };
  const PromptResult a1 = eng.run(prompt, nullptr, "tenant-a");
  EXPECT_EQ(hits(a1), 0);
  const PromptResult b1 = eng.run(prompt, nullptr, "tenant-b");
  EXPECT_EQ(hits(b1), 0) << "tenant b reused tenant a's entries";
  EXPECT_EQ(b1.computed_tokens, a1.computed_tokens);
  const PromptResult shared = eng.run(prompt, nullptr, "");
  EXPECT_EQ(hits(shared), 0);
  const PromptResult a2 = eng.run(prompt, nullptr, "tenant-a");
  EXPECT_EQ(hits(a2), 3);
  EXPECT_LT(a2.computed_tokens, a1.computed_tokens);
  EXPECT_LT(max_diff(a2.logits.data(), a1.logits.data(), a1.logits.size()), 1e-4f);  // an exact chain reuse
}

INSTANTIATE_TEST_SUITE_P(Fixtures, EngineBatch, ::testing::Values("qwen3_next_moe", "qwen3_5_dense"));

}  // namespace
}  // namespace hypic
