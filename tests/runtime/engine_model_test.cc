// The one caching engine on every backend (typed over devices: the CPU always, CUDA where the build has it
// and a GPU is present), on the fixture models: exactness of the stitch where it must be exact, the
// longest exact prefix (chain entries, a live sequence), the accounting of computed tokens, the damage of
// the naive and no-seam ablations, eviction (rebuilt entries give the cold run's logits). Each device is
// judged against its own full recompute: the CPU (fp32) to 1e-4, CUDA (bf16) within the three-computation
// bf16 bound of the fixture (bf16_agreement.h); on CUDA the same requests are also compared with the CPU
// engine. Then, on the fixtures and the shipped trained model: the quality of hypic mode against full,
// no-seam and naive (QualityTest), and the trained model as the well-conditioned case for bf16 (top-1 and
// greedy decode against the CPU).
#include "runtime/engine.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>

#include <nlohmann/json.hpp>

#include "kernels/rope.h"
#include "kernels/sampling.h"
#include "runtime/backends.h"
#include "runtime/error.h"
#include "runtime/sequence_state.h"
#include "runtime/text/tokenizer.h"
#include "tests/runtime/bf16_agreement.h"

namespace hypic {
namespace {

using testing_bf16::compare;
using testing_bf16::expect_close;

const std::string kModels = std::string(HYPIC_SOURCE_DIR) + "/tests/fixtures/models/";

float rel_err(const std::vector<float>& a, const std::vector<float>& b) {
  float num = 0, den = 1e-30f;
  for (size_t i = 0; i < a.size(); ++i) {
    num = std::max(num, std::fabs(a[i] - b[i]));
    den = std::max(den, std::fabs(b[i]));
  }
  return num / den;
}

float max_abs(const std::vector<float>& a, const std::vector<float>& b) {
  float m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(a[i] - b[i]));
  return m;
}

// Deterministic pseudo-text: ids in the BPE range of the fixture tokenizer (no special tokens).
std::vector<int> block(int n, int seed) {
  std::vector<int> v;
  uint32_t x = 2654435761u * (seed + 1);
  for (int i = 0; i < n; ++i) {
    x = x * 1664525u + 1013904223u;
    v.push_back(static_cast<int>((x >> 8) % 400) + 20);
  }
  return v;
}

using Param = std::tuple<std::string, std::string>;  // fixture, device

class EngineTest : public ::testing::TestWithParam<Param> {
 protected:
  void SetUp() override {
    const std::string& device = std::get<1>(GetParam());
    if (device == "cuda" && !(cuda_built() && cuda_device_present())) GTEST_SKIP() << "no CUDA backend or device";
    dir_ = kModels + std::get<0>(GetParam());
    dev_ = open_backend(dir_, device == "cuda" ? Device::Cuda : Device::Cpu);
    exact_ = dev_->device() == Device::Cpu;
    bounds_ = testing_bf16::load_bounds(dir_);
    V_ = dev_->config().vocab_size;
    blocks_ = {block(23, 1), block(17, 2), block(30, 3), block(12, 4), block(6, 5)};  // last: query
  }
  std::string what(const std::string& s) const { return std::get<0>(GetParam()) + "/" + std::get<1>(GetParam()) + " " + s; }
  std::vector<int> concat() const {
    std::vector<int> all;
    for (auto& b : blocks_) all.insert(all.end(), b.begin(), b.end());
    return all;
  }
  std::vector<float> full_logits(std::unique_ptr<State>* out_state = nullptr) {
    Engine e(*dev_, CacheMode::Full, {});
    auto st = dev_->new_state();
    auto l = e.forward(concat(), *st);
    if (out_state) *out_state = std::move(st);
    return l;
  }
  // `a` equals the reference `ref` (rows of V logits) as far as this device can tell: 1e-4 on the CPU,
  // the three-computation bf16 bound on CUDA.
  void expect_equal(const std::vector<float>& a, const std::vector<float>& ref, const std::string& s,
                    float cpu_tol = 1e-4f) {
    ASSERT_EQ(a.size(), ref.size());
    if (exact_) {
      EXPECT_LE(max_abs(a, ref), cpu_tol) << what(s);
    } else {
      const auto t = bounds_.three;
      expect_close(compare(a.data(), ref.data(), static_cast<int64_t>(a.size()) / V_, V_, bounds_.range),
                   {t.max_rel, t.mean_rel, 0.0}, what(s));
    }
  }
  float logit_err(const std::vector<float>& a, const std::vector<float>& ref) const {
    return compare(a.data(), ref.data(), static_cast<int64_t>(a.size()) / V_, V_, bounds_.range).max_rel;
  }
  // Entries built under each block's true prefix (the chain case) and the state after the first block.
  struct Chain {
    std::unique_ptr<State> base;
    std::vector<std::shared_ptr<SegmentEntry>> segs;
    std::vector<const SegmentEntry*> ptrs() const {
      std::vector<const SegmentEntry*> p;
      for (auto& s : segs) p.push_back(s.get());
      return p;
    }
  };
  Chain chain_entries(Engine& e) {
    Chain c;
    c.base = dev_->new_state();
    e.forward(blocks_[0], *c.base);
    auto ctx = dev_->clone(*c.base);
    for (size_t i = 1; i + 1 < blocks_.size(); ++i) {
      c.segs.push_back(e.prefill_segment(blocks_[i], ctx.get()));
      e.forward(blocks_[i], *ctx);
    }
    return c;
  }
  EngineOptions seam(int64_t w) const {
    EngineOptions o;
    o.seam_width = w;
    return o;
  }

  std::string dir_;
  std::unique_ptr<Backend> dev_;
  bool exact_ = true;
  testing_bf16::Bounds bounds_;
  int64_t V_ = 0;
  std::vector<std::vector<int>> blocks_;
};

TEST_P(EngineTest, LayerZeroOfStitchEqualsFullRecompute) {
  std::unique_ptr<State> full;
  full_logits(&full);
  Engine hypic(*dev_, CacheMode::Hypic, {});
  hypic.run(blocks_);  // builds the entries in isolation
  std::swap(blocks_[1], blocks_[2]);
  std::unique_ptr<State> full2;
  full_logits(&full2);
  PromptResult r = hypic.run(blocks_);  // all content hits, no chain: every later block composed
  for (auto& b : r.blocks) EXPECT_TRUE(b.hit);
  const auto got = dev_->to_host(*r.state), ref = dev_->to_host(*full2);
  ASSERT_EQ(dev_->config().layer_kinds[0], LayerKind::LinearAttention);
  const float tol = exact_ ? 1e-5f : 2e-2f;
  EXPECT_LE(rel_err(got->layers[0].lin.S, ref->layers[0].lin.S), tol) << what("layer 0 state");
  EXPECT_LE(rel_err(got->layers[0].lin.conv_tail, ref->layers[0].lin.conv_tail), tol) << what("layer 0 conv");
  // Above layer 0 a cached segment is an approximation: the test would be vacuous if it were exact.
  EXPECT_GT(rel_err(got->layers[1].lin.S, ref->layers[1].lin.S), 1e-4f) << what("layer 1");
}

TEST_P(EngineTest, ChainCaseEqualsFullRecompute) {
  const auto ref = full_logits();
  for (int64_t w : {0, 3, 8}) {
    Engine e(*dev_, CacheMode::Hypic, seam(w));
    Chain c = chain_entries(e);
    PromptResult s = e.stitch(std::move(c.base), c.ptrs(), blocks_.back());
    EXPECT_EQ(s.computed_tokens, 3 * w + static_cast<int64_t>(blocks_.back().size()));
    expect_equal(s.logits, ref, "chain seam " + std::to_string(w));
  }
}

TEST_P(EngineTest, SeamCoveringEverySegmentEqualsFullRecompute) {
  Engine e(*dev_, CacheMode::Hypic, seam(64));  // longer than every block
  e.run(blocks_);
  std::swap(blocks_[1], blocks_[3]);  // content hits in a new order: the stitch path, all seam
  PromptResult r = e.run(blocks_);
  for (auto& b : r.blocks) EXPECT_TRUE(b.hit);
  expect_equal(r.logits, full_logits(), "all seam");
}

TEST_P(EngineTest, DecodeAfterExactStitchMatchesDecodeAfterFullPrefill) {
  Engine e(*dev_, CacheMode::Hypic, {});
  Chain c = chain_entries(e);
  PromptResult s = e.stitch(std::move(c.base), c.ptrs(), blocks_.back());
  Engine full(*dev_, CacheMode::Full, {});
  PromptResult f = full.run(blocks_);
  if (exact_) {
    EXPECT_EQ(full.greedy_decode(s, 10), full.greedy_decode(f, 10));
    return;
  }
  // bf16: the continuations' logits, teacher-forced with the same ids.
  std::vector<float> a, b;
  for (int id : {33, 99, 250, 17}) {
    const int one[1] = {id};
    auto x = full.forward(one, *s.state), y = full.forward(one, *f.state);
    a.insert(a.end(), x.begin(), x.end());
    b.insert(b.end(), y.begin(), y.end());
  }
  expect_equal(a, b, "decode after chain stitch");
}

TEST_P(EngineTest, ComputedTokensAndHits) {
  Engine e(*dev_, CacheMode::Hypic, seam(8));
  int64_t body = 0;
  for (size_t i = 0; i + 1 < blocks_.size(); ++i) body += blocks_[i].size();
  const int64_t k = static_cast<int64_t>(blocks_.size()) - 1, q = blocks_.back().size();
  // Cold: every block prefilled in isolation (in the same pass) plus the stitch's seams and query.
  PromptResult cold = e.run(blocks_);
  EXPECT_EQ(cold.computed_tokens, body + (k - 1) * 8 + q);
  EXPECT_EQ(cold.reused_tokens, 0);
  for (auto& b : cold.blocks) EXPECT_FALSE(b.hit);
  EXPECT_EQ(cold.state->length, body + q);
  // The same prompt again: the exact chain (the snapshot at the last block) covers every block.
  PromptResult again = e.run(blocks_);
  EXPECT_EQ(again.computed_tokens, q);
  EXPECT_EQ(again.reused_tokens, body);
  for (auto& b : again.blocks) EXPECT_TRUE(b.hit);
  expect_equal(again.logits, cold.logits, "chain hit = the request that stored it");
  // Reordered blocks: no chain, but every block hits by content (position independence).
  std::swap(blocks_[1], blocks_[2]);
  PromptResult re = e.run(blocks_);
  EXPECT_EQ(re.computed_tokens, (k - 1) * 8 + q);
  EXPECT_EQ(re.reused_tokens, static_cast<int64_t>(blocks_[0].size()));  // the first block is exact
  for (auto& b : re.blocks) EXPECT_TRUE(b.hit);
  // One block more before the query: the exact chain of the reordered prompt, then the new block.
  std::vector<std::vector<int>> longer = blocks_;
  longer.insert(longer.end() - 1, block(19, 9));
  PromptResult ext = e.run(longer);
  EXPECT_EQ(ext.reused_tokens, body);
  EXPECT_EQ(ext.computed_tokens, 19 + 8 + q);  // its isolated prefill, its seam, the query
  for (size_t i = 0; i + 1 < ext.blocks.size(); ++i) EXPECT_TRUE(ext.blocks[i].hit) << i;
  EXPECT_FALSE(ext.blocks.back().hit);
}

TEST_P(EngineTest, HypicIsCloserToFullThanTheAblations) {
  // Entries built under their true prefixes isolate the composition: Transfer is exact, NaiveSum is not.
  const auto ref = full_logits();
  Engine e(*dev_, CacheMode::Hypic, {});
  Chain c = chain_entries(e);
  auto base2 = dev_->clone(*c.base);
  const float exact = logit_err(e.stitch(std::move(c.base), c.ptrs(), blocks_.back()).logits, ref);
  const float naive =
      logit_err(e.stitch(std::move(base2), c.ptrs(), blocks_.back(), Composition::NaiveSum).logits, ref);
  std::printf("[ metrics  ] %s chain stitch error: transfer %.6f naive %.6f (of the logit range)\n",
              what("").c_str(), exact, naive);
  EXPECT_GT(naive, 5 * exact + 1e-3f) << what("naive must be visibly worse");
}

TEST_P(EngineTest, PrefixModeReusesExactChain) {
  Engine e(*dev_, CacheMode::Prefix, {});
  PromptResult first = e.run(blocks_);
  EXPECT_EQ(first.computed_tokens, static_cast<int64_t>(concat().size()));
  PromptResult again = e.run(blocks_);
  EXPECT_EQ(again.computed_tokens, static_cast<int64_t>(blocks_.back().size()));
  expect_equal(again.logits, full_logits(), "prefix hit");
  // A changed middle block breaks the chain from there on.
  blocks_[2] = block(30, 99);
  PromptResult changed = e.run(blocks_);
  EXPECT_EQ(changed.computed_tokens, static_cast<int64_t>(blocks_[2].size() + blocks_[3].size() + blocks_[4].size()));
  expect_equal(changed.logits, full_logits(), "prefix partial hit");
}

TEST_P(EngineTest, ALiveSequenceIsContinuedExactly) {
  // A conversation: turn 2's prompt is turn 1's prompt, the reply and a new message. Given the live
  // sequence, every mode but full computes exactly the new tokens, and the result is the live state
  // continued (what decoding the reply and appending the message would give).
  for (CacheMode m : {CacheMode::Prefix, CacheMode::Hypic}) {
    Engine e(*dev_, m, {});
    PromptResult t1 = e.run(blocks_);
    std::vector<int> transcript = concat();
    const std::vector<int> reply = e.greedy_decode(t1, 5);
    // The last reply token is sampled but not yet run: it opens turn 2's new tokens.
    transcript.insert(transcript.end(), reply.begin(), reply.end() - 1);
    auto cont = dev_->clone(*t1.state);
    std::vector<int> fresh = {reply.back()};
    const std::vector<int> msg = block(11, 21), q2 = block(4, 22);
    fresh.insert(fresh.end(), msg.begin(), msg.end());
    fresh.insert(fresh.end(), q2.begin(), q2.end());
    const auto ref = e.forward(fresh, *cont);

    std::vector<std::vector<int>> turn2(blocks_.begin(), blocks_.end());
    turn2.back().insert(turn2.back().end(), reply.begin(), reply.end());  // query + reply
    turn2.push_back(msg);
    turn2.push_back(q2);
    LiveSequence live{std::move(t1.state), transcript};
    PromptResult t2 = e.run(cacheable_blocks(turn2), &live);
    EXPECT_EQ(t2.reused_tokens, static_cast<int64_t>(transcript.size())) << mode_name(m);
    EXPECT_EQ(t2.computed_tokens, static_cast<int64_t>(fresh.size())) << mode_name(m);
    EXPECT_EQ(live.state, nullptr) << "the live state was continued";
    EXPECT_EQ(t2.state->length, static_cast<int64_t>(transcript.size() + fresh.size()));
    expect_equal(t2.logits, ref, std::string("live continuation ") + mode_name(m), 1e-5f);
  }
}

TEST_P(EngineTest, UncachedBlockIsRecomputedAndNeverStored) {
  std::vector<PromptBlock> pb;
  for (auto& b : blocks_) pb.push_back({b, BlockCache::Cache});
  pb[2].cache = BlockCache::None;  // e.g. a timestamp or per-user block in the middle
  Engine e(*dev_, CacheMode::Hypic, {});
  e.run(pb);
  std::swap(pb[1], pb[3]);  // content hits, no chain
  PromptResult warm = e.run(pb);
  const int64_t k = static_cast<int64_t>(blocks_.size()) - 1, q = blocks_.back().size();
  EXPECT_EQ(warm.computed_tokens, (k - 2) * 8 + static_cast<int64_t>(blocks_[2].size()) + q);
  EXPECT_FALSE(warm.blocks[2].hit);
  EXPECT_TRUE(warm.blocks[1].hit && warm.blocks[3].hit);
  // k - 1 content entries and a chain snapshot per request (at its last block).
  EXPECT_EQ(e.store().stats().entries, static_cast<size_t>(k - 1 + 2));
  // An uncached first block: everything after it is stitched onto a computed prefix.
  pb[2].cache = BlockCache::Cache;
  pb[0].cache = BlockCache::None;
  PromptResult r = e.run(pb);
  EXPECT_EQ(r.state->length, static_cast<int64_t>(concat().size()));
}

TEST_P(EngineTest, BudgetEvictsLeastRecentlyUsedEntries) {
  Engine probe(*dev_, CacheMode::Hypic, {});
  const size_t one = probe.prefill_segment(blocks_[1])->bytes();
  EngineOptions opt;
  opt.cache_budget_bytes = 3 * one;  // about three entries of this size
  Engine e(*dev_, CacheMode::Hypic, opt);
  e.run(blocks_);  // four cacheable blocks and a snapshot
  const auto s = e.store().stats();
  EXPECT_LE(s.bytes, opt.cache_budget_bytes);
  EXPECT_GT(s.evictions, 0);
  // A pinned block survives the pressure of later prompts.
  const std::vector<int> pinned = block(23, 7);
  e.run(std::vector<PromptBlock>{{pinned, BlockCache::Pin}, {blocks_[4], BlockCache::Cache}});
  for (int i = 0; i < 4; ++i) e.run(std::vector<std::vector<int>>{block(40, 10 + i), block(3, 20)});
  EXPECT_TRUE(e.store().contains_content(content_key(e.keys(), pinned)));
  EXPECT_LE(e.store().stats().bytes, opt.cache_budget_bytes);
}

TEST_P(EngineTest, EvictedEntriesAreRebuiltToTheSameLogits) {
  // Hit or miss, a block's entry is the same isolated prefill, so what eviction removed (content entries,
  // the chain snapshot) changes the work, never the answer: after eviction a request equals a fresh
  // engine's run of it, computing what the cold run computed.
  Engine fresh(*dev_, CacheMode::Hypic, {});
  const PromptResult cold = fresh.run(blocks_);
  ASSERT_EQ(fresh.run(blocks_).computed_tokens, static_cast<int64_t>(blocks_.back().size())) << what("a chain hit");
  const size_t one_prompt = fresh.store().stats().bytes;
  EngineOptions opt;
  opt.cache_budget_bytes = one_prompt + one_prompt / 2;
  Engine e(*dev_, CacheMode::Hypic, opt);
  expect_equal(e.run(blocks_).logits, cold.logits, "cold under a budget");
  // Unrelated prompts of the same size push every entry of the first one out. Eviction is cost-aware:
  // the chain snapshot saves the most recompute per byte and goes last, once the store's clock has aged
  // past it.
  std::optional<SegmentKey> last;
  for (size_t i = 0; i + 1 < blocks_.size(); ++i) last = chain_key(last, content_key(e.keys(), blocks_[i]));
  for (int k = 0; k < 2 || (k < 40 && e.store().contains_chain(*last)); ++k) {
    std::vector<std::vector<int>> other;
    for (auto& b : blocks_) other.push_back(block(static_cast<int>(b.size()), 100 + 10 * k + static_cast<int>(other.size())));
    e.run(other);
  }
  EXPECT_GT(e.store().stats().evictions, 0);
  for (size_t i = 0; i + 1 < blocks_.size(); ++i)
    ASSERT_FALSE(e.store().contains_content(content_key(e.keys(), blocks_[i]))) << what("block ") << i;
  PromptResult again = e.run(blocks_);
  EXPECT_EQ(again.reused_tokens, 0) << what("the chain snapshot was evicted");
  EXPECT_EQ(again.computed_tokens, cold.computed_tokens);
  for (auto& b : again.blocks) EXPECT_FALSE(b.hit);
  expect_equal(again.logits, cold.logits, "after eviction of every entry");
  // Some entries evicted, some kept: a reordered prompt (no chain) mixes hits and rebuilt misses. A
  // budget of exactly one prompt's entries; one entry refreshed; two new blocks push out the oldest.
  std::vector<std::vector<int>> reordered = blocks_;
  std::swap(reordered[1], reordered[3]);
  const PromptResult ref = fresh.run(reordered);  // every block a hit
  EngineOptions tight;
  tight.cache_budget_bytes = one_prompt;
  Engine t(*dev_, CacheMode::Hypic, tight);
  t.run(blocks_);
  t.run(std::vector<std::vector<int>>{blocks_[2], block(3, 40)});
  t.run(std::vector<std::vector<int>>{block(static_cast<int>(blocks_[1].size()), 41),
                                      block(static_cast<int>(blocks_[3].size()), 42), block(3, 43)});
  PromptResult mixed = t.run(reordered);
  int hits = 0;
  for (auto& b : mixed.blocks) hits += b.hit;
  ASSERT_GT(hits, 0) << what("test setup: some entries must survive");
  ASSERT_LT(hits, static_cast<int>(mixed.blocks.size())) << what("test setup: some must be evicted");
  expect_equal(mixed.logits, ref.logits, "after partial eviction");
}

TEST_P(EngineTest, PrefixModeStaysExactWhileChainEntriesAreEvicted) {
  // Chain entries hold only the K/V rows since the previous snapshot, so an evicted link in the middle
  // of a chain must stop the walk there. Under a tight budget every request still equals full recompute.
  Engine probe(*dev_, CacheMode::Prefix, {});
  probe.run(blocks_);
  EngineOptions opt;
  opt.cache_budget_bytes = probe.store().stats().bytes * 3 / 2;
  // Split-invariant arithmetic (Backend::set_split_invariant): the chain walk is what is under test, and
  // full recompute splits the linear recurrences elsewhere, which at the random routers' near-tied tokens
  // can flip an expert in bf16 and move a whole prompt's logits.
  dev_->set_split_invariant(true);
  Engine e(*dev_, CacheMode::Prefix, opt), full(*dev_, CacheMode::Full, {});
  std::vector<std::vector<std::vector<int>>> prompts = {blocks_};
  for (int k = 0; k < 6; ++k) {
    auto p = blocks_;
    p[1 + k % 3] = block(static_cast<int>(p[1 + k % 3].size()), 60 + k);  // a changed block breaks the chain there
    if (k % 2) p.insert(p.end() - 1, block(9, 70 + k));
    prompts.push_back(p);
    prompts.push_back(blocks_);
  }
  int partial = 0;
  const int64_t whole = static_cast<int64_t>(concat().size() - blocks_.back().size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    PromptResult r = e.run(prompts[i]);
    partial += r.reused_tokens > 0 && r.reused_tokens < whole;
    expect_equal(r.logits, full.run(prompts[i]).logits, "prefix under eviction, prompt " + std::to_string(i));
  }
  EXPECT_GT(e.store().stats().evictions, 0);
  EXPECT_GT(partial, 0) << what("some requests must reuse part of a chain");
}

TEST_P(EngineTest, EntryUnderAPrefixHoldsThePrefillsStateAndLocalKeys) {
  // Seam 0 under a prefix runs the same steps on the same rows as continuing that prefix: the entry's
  // states, conv tails and values are the continuation's, its keys those rotated back by the block's start.
  const ModelConfig& cfg = dev_->config();
  Engine e(*dev_, CacheMode::Hypic, seam(0));
  auto ctx = dev_->new_state();
  e.forward(blocks_[0], *ctx);
  const int64_t start = ctx->length, n = static_cast<int64_t>(blocks_[2].size());
  const auto entry = e.prefill_segment(blocks_[2], ctx.get());
  EXPECT_EQ(ctx->length, start) << "the context is not modified";
  e.forward(blocks_[2], *ctx);
  const auto ref = dev_->to_host(*ctx);
  const int64_t row = cfg.num_kv_heads * cfg.head_dim;
  const float tol = exact_ ? 1e-5f : 1e-2f;
  for (int l = 0; l < cfg.num_layers; ++l) {
    const std::string at = what("layer " + std::to_string(l));
    if (cfg.layer_kinds[l] == LayerKind::LinearAttention) {
      const auto& ls = ref->layers[l].lin;
      EXPECT_LE(rel_err(dev_->to_host(entry->linear[l].full, ls.S.size(), DType::F32), ls.S), tol) << at;
      EXPECT_LE(rel_err(dev_->to_host(entry->linear[l].conv_tail, ls.conv_tail.size(), dev_->kv_dtype()), ls.conv_tail),
                tol)
          << at;
    } else {
      const auto& kv = ref->layers[l].attn;
      std::vector<float> k(kv.k.begin() + start * row, kv.k.begin() + (start + n) * row);
      const std::vector<float> v(kv.v.begin() + start * row, kv.v.begin() + (start + n) * row);
      cpu::rope_shift(k.data(), n, cfg.num_kv_heads, cfg.head_dim, cfg.rotary_dim, -start, cfg.rope_theta);
      EXPECT_LE(rel_err(dev_->to_host(entry->attention[l].k, k.size(), dev_->kv_dtype()), k), exact_ ? 1e-5f : 2e-2f)
          << at << " K";
      EXPECT_LE(rel_err(dev_->to_host(entry->attention[l].v, v.size(), dev_->kv_dtype()), v), tol) << at << " V";
    }
  }
}

TEST_P(EngineTest, EntryMatchesTheCpuEntry) {
  // The entry of a block, isolated and under a prefix, against the CPU backend's, below the first
  // attention layer (above it, bf16 noise of these large-weight fixtures dominates a comparison with
  // fp32): T, S(body | 0), the whole-block state and the conv tail. On the CPU the two are the same.
  const ModelConfig& cfg = dev_->config();
  auto cpu = open_backend(dir_, Device::Cpu);
  Engine ce(*cpu, CacheMode::Hypic, {}), ge(*dev_, CacheMode::Hypic, {});
  auto cctx = cpu->new_state(), gctx = dev_->new_state();
  ce.forward(blocks_[0], *cctx);
  ge.forward(blocks_[0], *gctx);
  const float tol = exact_ ? 1e-6f : 0.08f;
  const int64_t op = cfg.lin_transfer_numel(), st = cfg.lin_v_heads * cfg.lin_k_dim * cfg.lin_v_dim;
  const int64_t tail = (cfg.conv_kernel - 1) * cfg.lin_conv_dim();
  for (bool under_prefix : {false, true}) {
    const auto c = ce.prefill_segment(blocks_[2], under_prefix ? cctx.get() : nullptr);
    const auto g = ge.prefill_segment(blocks_[2], under_prefix ? gctx.get() : nullptr);
    EXPECT_EQ(g->seam, c->seam);
    EXPECT_EQ(g->tokens, c->tokens);
    for (int l = 0; cfg.layer_kinds[l] == LayerKind::LinearAttention; ++l) {
      const std::string at = what((under_prefix ? "under prefix, layer " : "isolated, layer ") + std::to_string(l));
      const LinearSegmentState &cl = c->linear[l], &gl = g->linear[l];
      const float eT = rel_err(dev_->to_host(gl.transfer, op, DType::F32), cpu->to_host(cl.transfer, op, DType::F32));
      const float eB = rel_err(dev_->to_host(gl.body, st, DType::F32), cpu->to_host(cl.body, st, DType::F32));
      const float eF = rel_err(dev_->to_host(gl.full, st, DType::F32), cpu->to_host(cl.full, st, DType::F32));
      const float eC = rel_err(dev_->to_host(gl.conv_tail, tail, dev_->kv_dtype()), cpu->to_host(cl.conv_tail, tail, DType::F32));
      std::printf("[ metrics  ] %s: T %.5f body %.5f full %.5f tail %.5f\n", at.c_str(), eT, eB, eF, eC);
      EXPECT_LE(eT, tol) << at;
      EXPECT_LE(eB, tol) << at;
      EXPECT_LE(eF, tol) << at;
      EXPECT_LE(eC, tol) << at;
    }
  }
}

TEST_P(EngineTest, ARefusedPromptLeavesTheLiveSequenceIntact) {
  Engine e(*dev_, CacheMode::Hypic, {});
  PromptResult t1 = e.run(blocks_);
  std::vector<std::vector<int>> bad = blocks_;
  bad.back().push_back(static_cast<int>(V_) + 5);  // outside the vocabulary
  LiveSequence live{std::move(t1.state), concat()};
  EXPECT_THROW(e.run(cacheable_blocks(bad), &live), InvalidArgument);
  ASSERT_NE(live.state, nullptr) << "the live state was not taken";
  EXPECT_EQ(live.state->length, static_cast<int64_t>(concat().size()));
}

TEST_P(EngineTest, EveryModeAgreesWithTheCpuReference) {
  // The same three requests per mode on this device and on the CPU backend: same accounting, logits
  // within this device's bound of the CPU's (on the CPU itself: identical).
  auto cpu = open_backend(dir_, Device::Cpu);
  std::vector<std::vector<int>> swapped = blocks_;
  std::swap(swapped[1], swapped[2]);
  for (CacheMode m : {CacheMode::Full, CacheMode::Prefix, CacheMode::Hypic, CacheMode::Naive, CacheMode::NoSeam}) {
    Engine ce(*cpu, m, {}), ge(*dev_, m, {});
    std::vector<float> gl, cl;
    for (int pass = 0; pass < 3; ++pass) {
      const auto& b = pass == 2 ? swapped : blocks_;
      PromptResult c = ce.run(b), g = ge.run(b);
      const std::string at = std::string(mode_name(m)) + " pass " + std::to_string(pass);
      EXPECT_EQ(g.computed_tokens, c.computed_tokens) << what(at);
      EXPECT_EQ(g.reused_tokens, c.reused_tokens) << what(at);
      EXPECT_EQ(g.state->length, c.state->length) << what(at);
      ASSERT_EQ(g.blocks.size(), c.blocks.size());
      for (size_t i = 0; i < g.blocks.size(); ++i) EXPECT_EQ(g.blocks[i].hit, c.blocks[i].hit) << what(at) << i;
      gl.insert(gl.end(), g.logits.begin(), g.logits.end());
      cl.insert(cl.end(), c.logits.begin(), c.logits.end());
    }
    EXPECT_EQ(ge.store().stats().entries, ce.store().stats().entries) << what(mode_name(m));
    expect_equal(gl, cl, std::string("vs cpu ") + mode_name(m), 0.0f);
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, EngineTest,
                         ::testing::Combine(::testing::Values("qwen3_next_moe", "qwen3_5_dense", "qwen3_5_moe"),
                                            ::testing::Values("cpu", "cuda")),
                         [](const auto& info) { return std::get<0>(info.param) + "_" + std::get<1>(info.param); });
// The lightning families (Ring, MiniMax): a scalar transfer operator; Ring rotates its linear states.
INSTANTIATE_TEST_SUITE_P(Lightning, EngineTest,
                         ::testing::Combine(::testing::Values("bailing_moe_linear", "minimax"),
                                            ::testing::Values("cpu", "cuda")),
                         [](const auto& info) { return std::get<0>(info.param) + "_" + std::get<1>(info.param); });
// The KDA families (a dense, non-symmetric transfer operator; MLA attention, with RoPE on its rope part in
// Ring-2.5's bailing_hybrid).
INSTANTIATE_TEST_SUITE_P(Kda, EngineTest,
                         ::testing::Combine(::testing::Values("kimi_linear", "bailing_hybrid"),
                                            ::testing::Values("cpu", "cuda")),
                         [](const auto& info) { return std::get<0>(info.param) + "_" + std::get<1>(info.param); });

TEST(CudaBackendFamilies, RefusesShapesItsKernelsCannotRunByName) {
  ModelConfig c = ModelConfig::load(kModels + "kimi_linear/config.json");
  c.lin_k_dim = 192;  // KDA heads above the kernels' 128
  try {
    c.check_cuda_supported();
    ADD_FAILURE() << "accepted a KDA head dim of 192";
  } catch (const ModelError& e) {
    EXPECT_NE(std::string(e.what()).find("model family 'kimi_linear'"), std::string::npos) << e.what();
  }
}

// A well-conditioned model for bf16 comparisons: the shipped trained model has large top-1 gaps (the
// random fixtures' tiny gaps let bf16 noise flip the arg-max, so there top-1 agreement says little). On
// its evaluation prompts the chain case (entries built under their true prefixes, then stitched) must
// give the CPU full recompute's arg-max on every prompt, and greedy decoding from the stitched state must
// follow the CPU's greedy answer token by token (teacher-forced with the CPU's tokens, so every step is
// compared) for at least kMinSteps steps in all. On the CPU both are exact up to 1e-4.
class TrainedModelOnDevice : public ::testing::TestWithParam<std::string> {
 protected:
  static constexpr int kPrompts = 6;
  static constexpr int kMinSteps = 4 * kPrompts;
  void SetUp() override {
    if (GetParam() == "cuda" && !(cuda_built() && cuda_device_present())) GTEST_SKIP() << "no CUDA backend or device";
    dir_ = std::string(HYPIC_SOURCE_DIR) + "/examples/models/hypic-qa-tiny";
    dev_ = open_backend(dir_, GetParam() == "cuda" ? Device::Cuda : Device::Cpu);
    cpu_ = open_backend(dir_, Device::Cpu);
    const Tokenizer tok = Tokenizer::from_file(dir_ + "/tokenizer.json");
    im_end_ = *tok.token_to_id("<|im_end|>");
    std::ifstream in(std::string(HYPIC_SOURCE_DIR) + "/tests/fixtures/eval/qa_eval_seed1.jsonl");
    for (std::string line; std::getline(in, line) && prompts_.size() < kPrompts;) {
      std::vector<std::vector<int>> blocks;
      const nlohmann::json j = nlohmann::json::parse(line);
      for (auto& b : j.at("blocks")) blocks.push_back(tok.encode(b.get<std::string>()));
      prompts_.push_back(std::move(blocks));
    }
    ASSERT_EQ(prompts_.size(), static_cast<size_t>(kPrompts));
  }
  // The device's stitch of entries built under their true prefixes.
  PromptResult chain_stitch(Engine& e, const std::vector<std::vector<int>>& blocks) {
    auto base = dev_->new_state();
    e.forward(blocks[0], *base);
    auto ctx = dev_->clone(*base);
    std::vector<std::shared_ptr<SegmentEntry>> segs;
    std::vector<const SegmentEntry*> ptrs;
    for (size_t i = 1; i + 1 < blocks.size(); ++i) {
      segs.push_back(e.prefill_segment(blocks[i], ctx.get()));
      ptrs.push_back(segs.back().get());
      e.forward(blocks[i], *ctx);
    }
    return e.stitch(std::move(base), ptrs, blocks.back());
  }
  // Worst logit error as a fraction of the reference row's range.
  static float row_err(const std::vector<float>& a, const std::vector<float>& ref) {
    const auto [lo, hi] = std::minmax_element(ref.begin(), ref.end());
    return max_abs(a, ref) / std::max(*hi - *lo, 1e-6f);
  }
  std::string dir_;
  std::unique_ptr<Backend> dev_, cpu_;
  int im_end_ = 0;
  std::vector<std::vector<std::vector<int>>> prompts_;
};

TEST_P(TrainedModelOnDevice, ChainStitchAndGreedyDecodeFollowTheCpu) {
  const bool exact = dev_->device() == Device::Cpu;
  // Limits at a few times the H200 measurement (printed below); the CPU is held to fp32 exactness.
  // H200: stitch 0.00145, decode 0.00437 of the logit range.
  const float stitch_limit = exact ? 1e-5f : 0.005f, decode_limit = exact ? 1e-5f : 0.015f;
  Engine full(*cpu_, CacheMode::Full, {}), e(*dev_, CacheMode::Hypic, {});
  int top1_same = 0, steps = 0, steps_same = 0;
  float stitch_err = 0, decode_err = 0;
  for (auto& p : prompts_) {
    PromptResult ref = full.run(p);
    PromptResult got = chain_stitch(e, p);
    stitch_err = std::max(stitch_err, row_err(got.logits, ref.logits));
    top1_same += cpu::argmax(got.logits.data(), got.logits.size()) == cpu::argmax(ref.logits.data(), ref.logits.size());
    // The CPU's greedy answer up to <|im_end|>, fed to both.
    for (int t = 0; t < 8; ++t) {
      const int want = static_cast<int>(cpu::argmax(ref.logits.data(), ref.logits.size()));
      steps_same += cpu::argmax(got.logits.data(), got.logits.size()) == want;
      ++steps;
      if (want == im_end_) break;
      const int one[1] = {want};
      ref.logits = full.forward(one, *ref.state);
      got.logits = e.forward(one, *got.state);
      decode_err = std::max(decode_err, row_err(got.logits, ref.logits));
    }
  }
  std::printf("[ metrics  ] trained model on %s: chain stitch top-1 %d/%d, max error %.5f of the logit range "
              "(limit %.5f); greedy decode %d/%d steps agree (at least %d), max error %.5f (limit %.5f)\n",
              GetParam().c_str(), top1_same, kPrompts, stitch_err, stitch_limit, steps_same, steps, kMinSteps,
              decode_err, decode_limit);
  EXPECT_EQ(top1_same, kPrompts);
  EXPECT_GE(steps, kMinSteps) << "too few decode steps compared";
  EXPECT_EQ(steps_same, steps);
  EXPECT_LE(stitch_err, stitch_limit);
  EXPECT_LE(decode_err, decode_limit);
}

// A prompt run in steps (Engine::begin, PromptJob: what hypic serve's chunked admission runs) answers as
// the one-pass run on the device, in every main mode, with misses and then hits (the same prompts again
// with their documents in reverse order).
TEST_P(TrainedModelOnDevice, PromptsInStepsMatchOnePass) {
  const bool exact = dev_->device() == Device::Cpu;
  // The CPU: its linear attention's rounding across chunk boundaries (tests/runtime/engine_prompt_job_model_test.cc);
  // CUDA: the chain-stitch limit above (the same kernels, other pass shapes).
  const float limit = exact ? 1e-5f : 0.005f;
  float worst = 0;
  int top1_same = 0, compared = 0;
  // The CPU is covered in depth by tests/runtime/engine_prompt_job_model_test.cc: here it runs one mode
  // and prompt (the test stays exercised off the GPU, and the slow program short).
  const std::vector<CacheMode> modes =
      exact ? std::vector<CacheMode>{CacheMode::Hypic} : std::vector<CacheMode>{CacheMode::Full, CacheMode::Prefix, CacheMode::Hypic};
  const size_t prompts = exact ? 1 : 3;
  for (CacheMode mode : modes) {
    Engine one_pass(*dev_, mode, {}), stepped(*dev_, mode, {});
    for (int round = 0; round < 2; ++round) {
      for (size_t i = 0; i < prompts; ++i) {
        std::vector<std::vector<int>> p = prompts_[i];
        if (round == 1) std::reverse(p.begin(), p.end() - 1);
        const PromptResult ref = one_pass.run(p);
        std::unique_ptr<PromptJob> job = stepped.begin(cacheable_blocks(p));
        while (job->step(32)) {
        }
        const PromptResult got = job->finish();
        EXPECT_EQ(got.computed_tokens, ref.computed_tokens) << mode_name(mode);
        worst = std::max(worst, row_err(got.logits, ref.logits));
        top1_same += cpu::argmax(got.logits.data(), got.logits.size()) == cpu::argmax(ref.logits.data(), ref.logits.size());
        ++compared;
      }
    }
  }
  std::printf("[ metrics  ] prompts in steps of 32 on %s: top-1 %d/%d as one pass, max error %.6f of the logit range "
              "(limit %.6f)\n", GetParam().c_str(), top1_same, compared, worst, limit);
  EXPECT_EQ(top1_same, compared);
  EXPECT_LE(worst, limit);
}

INSTANTIATE_TEST_SUITE_P(Devices, TrainedModelOnDevice, ::testing::Values("cpu", "cuda"),
                         [](const auto& info) { return info.param; });

// Every mode of the CUDA engine against the CPU engine on the trained model (the random fixtures' top-1
// gaps are within bf16 noise, so EngineTest.EveryModeAgreesWithTheCpuReference cannot ask for top-1
// agreement there): the same accounting, the CPU's arg-max on every prompt, the logit error printed and
// bounded. Only a device other than the CPU has something to compare.
class TrainedModelModes : public TrainedModelOnDevice {};

TEST_P(TrainedModelModes, EveryModeFollowsTheCpuEngine) {
  const float limit = 0.006f;  // H200: 0.00105 (prefix) to 0.00183 (naive) of the logit range
  for (CacheMode m : {CacheMode::Full, CacheMode::Prefix, CacheMode::Hypic, CacheMode::Naive, CacheMode::NoSeam}) {
    Engine ce(*cpu_, m, {}), ge(*dev_, m, {});
    int same = 0;
    float err = 0;
    for (auto& p : prompts_) {
      const PromptResult c = ce.run(p), g = ge.run(p);
      EXPECT_EQ(g.computed_tokens, c.computed_tokens) << mode_name(m);
      EXPECT_EQ(g.reused_tokens, c.reused_tokens) << mode_name(m);
      same += cpu::argmax(g.logits.data(), g.logits.size()) == cpu::argmax(c.logits.data(), c.logits.size());
      err = std::max(err, row_err(g.logits, c.logits));
    }
    std::printf("[ metrics  ] trained model, %s on %s vs cpu: top-1 %d/%d, max error %.5f of the logit range (limit %.5f)\n",
                mode_name(m), GetParam().c_str(), same, kPrompts, err, limit);
    EXPECT_EQ(same, kPrompts) << mode_name(m);
    EXPECT_LE(err, limit) << mode_name(m);
  }
}

INSTANTIATE_TEST_SUITE_P(Devices, TrainedModelModes, ::testing::Values("cuda"),
                         [](const auto& info) { return info.param; });

// The quality the product sells, bounded in CI: on prompts whose documents recur in new orders (and
// first-seen ones are prefilled in isolation in the same pass), hypic mode's first-token distribution
// against full recompute, next to the two ablations run on the same prompts. Per model: the long-memory
// fixtures with tests/fixtures/eval/pic_prompts.jsonl, the shipped trained model with its evaluation
// prompts. The bounds are a few times the CPU measurement (printed as "[ metrics  ]"); hypic must be
// strictly closer to full than no-seam and naive. If hypic silently degraded to either ablation this fails.
struct QualityCase {
  std::string model;   // directory
  std::string prompts;  // jsonl with "blocks"
  size_t count;
  double max_kl;            // bound on hypic's mean first-token KL (CPU)
  double min_top1;          // bound on hypic's top-1 agreement with full (CPU; 16 prompts: 0.93 allows one miss)
  bool naive_is_distinct;   // false where the transfer operator vanishes (short-memory heads: T = 0)
  double cuda_max_kl;       // bound on hypic's KL on CUDA (bf16: a few times the H200 measurement)
  bool seam_is_distinct = true;  // false where the first tokens of a block carry nothing its answer reads
  double max_naive_top1 = 1.0;   // naive's top-1 agreement must stay below this (a model whose answers
                                 // need the composed state)
};

const QualityCase kQualityCases[] = {
    // Measured on the CPU, KL hypic / noseam / naive; top-1 agreement of hypic (the test log prints them).
    // qwen3_next_moe: 0.00192 / 0.0509 / 0.808; 0.938 (noseam 0.812, naive 0.500)
    // On the H200 (bf16, split-invariant, against the device's own full recompute): hypic 0.0292, noseam
    // 0.0360, naive 0.836.
    {"tests/fixtures/models/qwen3_next_moe", "tests/fixtures/eval/pic_prompts.jsonl", 16, 0.0060, 0.80, true, 0.20},
    // qwen3_5_dense: 0.00091 / 0.0035 / 1.25; 1.000 (noseam 0.812, naive 0.562)
    // H200: hypic 0.00487, noseam 0.0109, naive 1.33.
    {"tests/fixtures/models/qwen3_5_dense", "tests/fixtures/eval/pic_prompts.jsonl", 16, 0.0030, 0.93, true, 0.020},
    // qwen3_5_moe: 0.00029 / 0.0232 / 0.226; 1.000 (noseam 1.000, naive 0.750)
    // H200: hypic 0.0301, noseam 0.0156, naive 0.240 (short memory: naive is near, the bf16 floor is not).
    {"tests/fixtures/models/qwen3_5_moe", "tests/fixtures/eval/pic_prompts.jsonl", 16, 0.0010, 0.93, true, 0.25},
    // The trained model's Gated DeltaNet heads forget within a token or two (docs/quality.md): T is 0 to
    // float precision, so naive composition equals hypic there and only the seam can be told apart.
    // hypic-qa-tiny: 0.000093 / 0.000133 / 0.000094; 1.000 (noseam 1.000, naive 1.000)
    // H200: hypic 0.000065, noseam 0.000082, naive 0.000071.
    {"examples/models/hypic-qa-tiny", "tests/fixtures/eval/qa_eval_seed1.jsonl", 16, 0.0003, 0.93, false, 0.0002},
    // The long-memory model: its ordered questions (which of two or three statements of the meeting place is
    // the later one) are answered from the Gated DeltaNet state, so naive composition loses most of them.
    // Trained on blocks cached without seams, it reads a seam's in-context tokens as slightly out of
    // distribution (KL above noseam's, top-1 the same), so only naive must be told apart here.
    // hypic-qa-long: 0.00161 / 0.00053 / 4.90; 1.000 (noseam 1.000, naive 0.500)
    // H200 (hypic eval-pic, 600 prompts): hypic 0.00062, noseam 0.00018, naive 3.4.
    {"examples/models/hypic-qa-long", "tests/fixtures/eval/long_eval_seed1.jsonl", 24, 0.005, 0.95, true, 0.005,
     false, 0.8},
};

void PrintTo(const QualityCase& c, std::ostream* os) { *os << c.model; }

using QualityParam = std::tuple<QualityCase, std::string>;  // case, device

class QualityTest : public ::testing::TestWithParam<QualityParam> {};

TEST_P(QualityTest, HypicIsCloseToFullAndCloserThanNoSeamAndNaive) {
  const QualityCase& qc = std::get<0>(GetParam());
  const std::string& device = std::get<1>(GetParam());
  if (device == "cuda" && !(cuda_built() && cuda_device_present())) GTEST_SKIP() << "no CUDA backend or device";
  const std::string dir = std::string(HYPIC_SOURCE_DIR) + "/" + qc.model;
  auto dev = open_backend(dir, device == "cuda" ? Device::Cuda : Device::Cpu);
  // Split-invariant arithmetic on CUDA: the full recompute and the stitch then differ by what caching does
  // (isolated entries, composition, seams), not by where the chunked kernels cut the rows, which on the
  // random MoE fixtures flips experts at near-tied tokens (qwen3_5_moe's KL moved 0.08 -> 0.27 when the
  // attention's key split changed).
  dev->set_split_invariant(true);
  const Tokenizer tok = Tokenizer::from_file(dir + "/tokenizer.json");
  std::ifstream in(std::string(HYPIC_SOURCE_DIR) + "/" + qc.prompts);
  ASSERT_TRUE(in) << "missing " << qc.prompts;
  std::vector<std::vector<std::vector<int>>> prompts;
  size_t recurring = 0;
  std::map<std::string, int> seen;
  for (std::string line; std::getline(in, line) && prompts.size() < qc.count;) {
    std::vector<std::vector<int>> blocks;
    const nlohmann::json j = nlohmann::json::parse(line);
    const auto texts = j.at("blocks").get<std::vector<std::string>>();
    for (size_t b = 0; b < texts.size(); ++b) {
      blocks.push_back(tok.encode(texts[b]));
      // Documents only: not the first block (a trivial exact prefix) nor the query.
      recurring += b > 0 && b + 1 < texts.size() && seen[texts[b]]++ > 0;
    }
    prompts.push_back(std::move(blocks));
  }
  ASSERT_EQ(prompts.size(), qc.count);
  ASSERT_GE(recurring, qc.count) << "the prompts must reuse documents for this to measure reuse";
  Engine full(*dev, CacheMode::Full, {});
  std::vector<std::vector<float>> ref;
  for (auto& p : prompts) ref.push_back(full.run(p).logits);
  const int64_t V = dev->config().vocab_size;
  std::map<CacheMode, double> kl, top1;
  for (CacheMode m : {CacheMode::Hypic, CacheMode::NoSeam, CacheMode::Naive}) {
    Engine e(*dev, m, {});
    int64_t hits = 0;
    for (size_t i = 0; i < prompts.size(); ++i) {
      PromptResult r = e.run(prompts[i]);
      for (auto& b : r.blocks) hits += b.hit;
      kl[m] += cpu::kl_divergence(ref[i].data(), r.logits.data(), V) / prompts.size();
      top1[m] += (cpu::argmax(ref[i].data(), V) == cpu::argmax(r.logits.data(), V)) / double(prompts.size());
    }
    EXPECT_GE(hits, static_cast<int64_t>(recurring)) << mode_name(m) << ": recurring documents must hit";
  }
  const std::string at = qc.model + " on " + device;
  std::printf("[ metrics  ] %s, %zu prompts: first-token KL vs full hypic %.6f (bound %.4f) noseam %.6f naive %.6f; "
              "top-1 agreement hypic %.3f (bound %.2f) noseam %.3f naive %.3f\n",
              at.c_str(), prompts.size(), kl[CacheMode::Hypic], qc.max_kl, kl[CacheMode::NoSeam], kl[CacheMode::Naive],
              top1[CacheMode::Hypic], qc.min_top1, top1[CacheMode::NoSeam], top1[CacheMode::Naive]);
  if (device == "cpu") {
    EXPECT_LT(kl[CacheMode::Hypic], qc.max_kl) << at;
    EXPECT_GE(top1[CacheMode::Hypic], qc.min_top1) << at;
    if (qc.seam_is_distinct) {
      EXPECT_LT(kl[CacheMode::Hypic], kl[CacheMode::NoSeam]) << at << ": the seam must help";
    }
    EXPECT_GE(top1[CacheMode::Hypic], top1[CacheMode::NoSeam]) << at;
    if (qc.max_naive_top1 < 1.0) {
      EXPECT_LT(top1[CacheMode::Naive], qc.max_naive_top1) << at << ": naive composition must lose answers here";
    }
    if (qc.naive_is_distinct) {
      EXPECT_LT(kl[CacheMode::Hypic], kl[CacheMode::Naive]) << at << ": the transfer operator must help";
      EXPECT_GE(top1[CacheMode::Hypic], top1[CacheMode::Naive]) << at;
    } else {
      EXPECT_LE(kl[CacheMode::Hypic], kl[CacheMode::Naive] * (1 + 1e-3) + 1e-9) << at;
    }
  } else {
    // bf16: the isolated entries' states and the stitch's rows round differently from full recompute, which
    // moves the random fixtures' KL by a few hundredths and swamps hypic vs noseam there; naive
    // composition stays worse.
    EXPECT_LT(kl[CacheMode::Hypic], qc.cuda_max_kl) << at;
    if (qc.naive_is_distinct) {
      EXPECT_LT(kl[CacheMode::Hypic], kl[CacheMode::Naive]) << at << ": the transfer operator must help";
      if (qc.max_naive_top1 < 1.0) {
        EXPECT_LT(top1[CacheMode::Naive], qc.max_naive_top1) << at;
      }
    } else {
      // The trained model's large top-1 gaps survive bf16 (eval-pic on the H200: hypic top-1 0.995).
      EXPECT_GE(top1[CacheMode::Hypic], qc.min_top1) << at;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Models, QualityTest,
                         ::testing::Combine(::testing::ValuesIn(kQualityCases), ::testing::Values("cpu", "cuda")),
                         [](const auto& info) {
                           const std::string& m = std::get<0>(info.param).model;
                           std::string name = m.substr(m.rfind('/') + 1) + "_" + std::get<1>(info.param);
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

}  // namespace
}  // namespace hypic
