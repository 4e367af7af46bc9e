// The caching engine on CUDA (runtime/cuda/cuda_engine.h) on the fixture models against the CPU Engine
// (fp32) in the same mode on the same blocks: logits within the bf16 bounds of the fixture, the same
// computed tokens and hit pattern, hits on the second run; the chain case against a full CUDA prefill;
// the device entry against the CPU entry; decode continuing the stitched state; eviction.
#include "runtime/cuda/cuda_engine.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "kernels/cuda/check.h"
#include "kernels/dtype.h"
#include "runtime/cuda/cuda_segment_prefill.h"
#include "runtime/cuda/cuda_stitch.h"
#include "runtime/engine.h"
#include "runtime/hybrid_model.h"
#include "kernels/rope.h"
#include "runtime/segment_prefill.h"
#include "tests/runtime/cuda/bf16_agreement.h"

namespace hypic {
namespace {

using testing_bf16::Agreement;
using testing_bf16::compare;
using testing_bf16::expect_close;
using testing_bf16::Tolerance;

const std::string kModels = std::string(HYPIC_SOURCE_DIR) + "/tests/fixtures/models/";

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

std::vector<float> download_f32(const float* dev, size_t n) {
  std::vector<float> h(n);
  HYPIC_CUDA_CHECK(cudaDeviceSynchronize());
  HYPIC_CUDA_CHECK(cudaMemcpy(h.data(), dev, sizeof(float) * n, cudaMemcpyDeviceToHost));
  return h;
}

std::vector<float> download_bf16(const cuda::bf16* dev, size_t n) {
  std::vector<uint16_t> raw(n);
  HYPIC_CUDA_CHECK(cudaDeviceSynchronize());
  HYPIC_CUDA_CHECK(cudaMemcpy(raw.data(), dev, 2 * n, cudaMemcpyDeviceToHost));
  std::vector<float> h(n);
  for (size_t i = 0; i < n; ++i) h[i] = bf16_to_f32(raw[i]);
  return h;
}

// max|a - b| / max|b|.
float rel_err(const std::vector<float>& a, const std::vector<float>& b) {
  float num = 0, den = 1e-30f;
  for (size_t i = 0; i < a.size(); ++i) {
    num = std::max(num, std::fabs(a[i] - b[i]));
    den = std::max(den, std::fabs(b[i]));
  }
  return num / den;
}

// A wrong operator or state shows as an O(1) error; bf16 activations through the earlier layers of these
// large-weight fixtures account for a few percent.
constexpr float kStateTol = 0.08f;

class CudaEngineTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (!cuda::device_available()) GTEST_SKIP() << "no CUDA device";
    const std::string dir = kModels + GetParam();
    cpu_ = HybridModel::load(dir);
    gpu_ = CudaModel::load(dir);
    bounds_ = testing_bf16::load_bounds(dir);
    V_ = cpu_->config().vocab_size;
    blocks_ = {block(23, 1), block(17, 2), block(30, 3), block(12, 4), block(6, 5)};  // last: query
  }
  std::vector<int> concat() const {
    std::vector<int> all;
    for (auto& b : blocks_) all.insert(all.end(), b.begin(), b.end());
    return all;
  }
  // Logits of `steps` tokens fed after each prompt state (teacher-forced with the same ids on both sides).
  void feed(CudaPromptResult& g, PromptResult& c, const std::vector<int>& ids, std::vector<float>& gl,
            std::vector<float>& cl) {
    for (int id : ids) {
      const int one[1] = {id};
      const auto a = gpu_->forward(one, g.state);
      const auto b = cpu_->forward(one, c.state);
      gl.insert(gl.end(), a.begin(), a.end());
      cl.insert(cl.end(), b.begin(), b.end());
    }
  }

  std::unique_ptr<HybridModel> cpu_;
  std::unique_ptr<CudaModel> gpu_;
  testing_bf16::Bounds bounds_;
  int64_t V_ = 0;
  std::vector<std::vector<int>> blocks_;
};

TEST_P(CudaEngineTest, EveryModeMatchesTheCpuEngine) {
  // Three requests per mode: cold, the same again (hits), then the middle blocks swapped (content hits,
  // a broken chain); the last two are continued by six teacher-forced decode steps.
  std::vector<std::vector<int>> swapped = blocks_;
  std::swap(swapped[1], swapped[2]);
  std::vector<float> all_g, all_c;  // every row of every mode, for top-1 agreement overall
  for (CacheMode m : {CacheMode::Full, CacheMode::Prefix, CacheMode::Hypic, CacheMode::Naive, CacheMode::NoSeam}) {
    const std::string what = GetParam() + " " + mode_name(m);
    Engine ce(*cpu_, m, {});
    CudaEngine ge(*gpu_, m, {});
    std::vector<float> gl, cl;
    for (int pass = 0; pass < 3; ++pass) {
      const auto& b = pass == 2 ? swapped : blocks_;
      PromptResult c = ce.run(b);
      CudaPromptResult g = ge.run(b);
      ASSERT_EQ(g.logits.size(), static_cast<size_t>(V_));
      EXPECT_EQ(g.computed_tokens, c.computed_tokens) << what << " pass " << pass;
      EXPECT_EQ(g.prompt_tokens, c.prompt_tokens) << what;
      EXPECT_EQ(g.state.length, c.state.length) << what;
      EXPECT_GT(g.ttft_ms, 0.0);
      ASSERT_EQ(g.blocks.size(), c.blocks.size());
      for (size_t i = 0; i < g.blocks.size(); ++i) {
        EXPECT_EQ(g.blocks[i].hit, c.blocks[i].hit) << what << " pass " << pass << " block " << i;
        EXPECT_EQ(g.blocks[i].tokens, c.blocks[i].tokens) << what;
      }
      if (pass == 1 && m != CacheMode::Full) {
        for (auto& o : g.blocks) EXPECT_TRUE(o.hit) << what << ": every block hits on the second run";
      }
      gl.insert(gl.end(), g.logits.begin(), g.logits.end());
      cl.insert(cl.end(), c.logits.begin(), c.logits.end());
      if (pass >= 1) feed(g, c, {21, 57, 300, 140, 77, 401}, gl, cl);
    }
    EXPECT_EQ(ge.store().stats().entries, ce.store().stats().entries) << what;
    EXPECT_EQ(ge.store().stats().content_hits, ce.store().stats().content_hits) << what;
    EXPECT_EQ(ge.store().stats().chain_hits, ce.store().stats().chain_hits) << what;
    // Last rows of short prompts and their continuations: the three-computation bound for every mode (the
    // full mode itself errs by up to 2x transformers' mean on these rows).
    const Tolerance t = bounds_.three;
    const int64_t rows = static_cast<int64_t>(gl.size()) / V_;
    expect_close(compare(gl.data(), cl.data(), rows, V_, bounds_.range), {t.max_rel, t.mean_rel, 0.0}, what);
    all_g.insert(all_g.end(), gl.begin(), gl.end());
    all_c.insert(all_c.end(), cl.begin(), cl.end());
  }
  const int64_t rows = static_cast<int64_t>(all_g.size()) / V_;
  const Agreement a = compare(all_g.data(), all_c.data(), rows, V_, bounds_.range);
  std::printf("[ metrics  ] %s top-1 over %lld rows of every mode: %.3f\n", GetParam().c_str(),
              static_cast<long long>(rows), a.top1);
  EXPECT_GE(a.top1, bounds_.three.top1);
}

TEST_P(CudaEngineTest, GreedyDecodeFromTheStitchedStateFollowsTheCpu) {
  CudaEngine ge(*gpu_, CacheMode::Hypic, {});
  Engine ce(*cpu_, CacheMode::Hypic, {});
  ge.run(blocks_);
  ce.run(blocks_);
  CudaPromptResult g = ge.run(blocks_);
  PromptResult c = ce.run(blocks_);
  const auto gt = ge.greedy_decode(g, 4);
  const auto ct = ce.greedy_decode(c, 4);
  ASSERT_EQ(gt.size(), 4u);
  EXPECT_EQ(g.state.length, c.state.length);
  // bf16 may flip a near tie: tokens must agree up to the first step whose CPU top-2 margin is small.
  PromptResult ref = ce.run(blocks_);
  std::vector<float> logits = ref.logits;
  for (size_t i = 0; i < gt.size(); ++i) {
    std::vector<float> sorted = logits;
    std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(), std::greater<float>());
    if (sorted[0] - sorted[1] < 0.08f * bounds_.range) break;
    EXPECT_EQ(gt[i], ct[i]) << GetParam() << " step " << i;
    const int one[1] = {ct[i]};
    logits = cpu_->forward(one, ref.state);
  }
}

TEST_P(CudaEngineTest, ChainCaseReproducesAFullCudaPrefill) {
  const ModelConfig& cfg = cpu_->config();
  ASSERT_EQ(cfg.layer_kinds[0], LayerKind::LinearAttention);
  for (int64_t seam : {int64_t{0}, int64_t{8}}) {
    // Entries built under each block's true prefix, stitched, against the CUDA prefill that built those
    // prefixes (block by block, then the query). Nothing is approximate, but the entries, the stitch and
    // the prefill are three bf16 computations (other row batches, keys rotated back and forth in bf16), and
    // these fixtures amplify bf16 noise layer by layer (MoE routing flips): the first linear layer's state
    // must agree closely, deeper ones within 0.3 of their size (a wrong composition errs by O(1)).
    auto first = prefill_segment(*gpu_, blocks_[0], seam);
    CudaSequenceState ctx = gpu_->new_state();
    gpu_->forward(blocks_[0], ctx);
    std::vector<std::shared_ptr<const CudaSegmentEntry>> segs;
    for (size_t i = 1; i + 1 < blocks_.size(); ++i) {
      segs.push_back(std::make_shared<CudaSegmentEntry>(prefill_segment(*gpu_, blocks_[i], seam, &ctx)));
      gpu_->forward(blocks_[i], ctx);
    }
    CudaStitchResult s = stitch(*gpu_, state_from_first_segment(*gpu_, first), segs, blocks_.back());
    const auto ref = gpu_->forward(blocks_.back(), ctx);
    const std::string what = GetParam() + " chain, seam " + std::to_string(seam);
    EXPECT_EQ(s.computed_tokens, 3 * seam + static_cast<int64_t>(blocks_.back().size()));
    expect_close(compare(s.logits.data(), ref.data(), 1, V_, bounds_.range),
                 {bounds_.three.max_rel, bounds_.three.mean_rel, 0.0}, what);
    const SequenceState a = s.state.download(cfg), b = ctx.download(cfg);
    ASSERT_EQ(a.length, b.length);
    for (size_t l = 0; l < a.layers.size(); ++l) {
      if (cfg.layer_kinds[l] == LayerKind::LinearAttention) {
        const float e = rel_err(a.layers[l].lin.S, b.layers[l].lin.S);
        std::printf("[ metrics  ] %s linear state %zu: %.5f\n", what.c_str(), l, e);
        EXPECT_LE(e, l == 0 ? 1e-2f : 0.3f) << what << " layer " << l;
      } else {
        EXPECT_EQ(a.layers[l].attn.rows(), b.layers[l].attn.rows()) << what << " layer " << l;
      }
    }
    // Decode continues alike from both.
    std::vector<float> dg, df;
    for (int id : {33, 99, 250}) {
      const int one[1] = {id};
      const auto x = gpu_->forward(one, s.state);
      const auto y = gpu_->forward(one, ctx);
      dg.insert(dg.end(), x.begin(), x.end());
      df.insert(df.end(), y.begin(), y.end());
    }
    expect_close(compare(dg.data(), df.data(), 3, V_, bounds_.range),
                 {bounds_.three.max_rel, bounds_.three.mean_rel, 0.0}, what + " decode");
  }
}

TEST_P(CudaEngineTest, DeviceEntryMatchesTheCpuEntry) {
  // Against the CPU entry below the first attention layer (above it, bf16 noise of these large-weight
  // fixtures dominates any comparison with fp32): T, S(body|0), the whole-segment state and the conv tail.
  const ModelConfig& cfg = cpu_->config();
  SequenceState cctx = cpu_->new_state();
  cpu_->forward(blocks_[0], cctx);
  CudaSequenceState gctx = gpu_->new_state();
  gpu_->forward(blocks_[0], gctx);
  for (bool under_prefix : {false, true}) {
    const SegmentEntry c = prefill_segment(*cpu_, blocks_[2], 8, under_prefix ? &cctx : nullptr);
    const CudaSegmentEntry g = prefill_segment(*gpu_, blocks_[2], 8, under_prefix ? &gctx : nullptr);
    EXPECT_EQ(g.seam, c.seam);
    EXPECT_EQ(g.tokens, c.tokens);
    EXPECT_EQ(g.linear.size(), c.linear.size());
    const std::string what = GetParam() + (under_prefix ? " under prefix" : " isolated");
    for (int l = 0; cfg.layer_kinds[l] == LayerKind::LinearAttention; ++l) {
      const LinearSegmentState& cl = c.linear[l];
      const CudaLinearSegment& gl = g.linear[l];
      const float eT = rel_err(download_f32(gl.transfer, cl.transfer.size()), cl.transfer);
      const float eF = rel_err(download_f32(gl.full, cl.full.size()), cl.full);
      const float eB = rel_err(download_f32(gl.body, cl.body.size()), cl.body);
      const float eC = rel_err(download_bf16(gl.conv_tail, cl.conv_tail.size()), cl.conv_tail);
      std::printf("[ metrics  ] %s layer %d: T %.5f full %.5f body %.5f tail %.5f\n", what.c_str(), l, eT, eF, eB, eC);
      EXPECT_LE(eT, kStateTol) << what << " T " << l;
      EXPECT_LE(eF, kStateTol) << what << " full " << l;
      EXPECT_LE(eB, kStateTol) << what << " body " << l;
      EXPECT_LE(eC, kStateTol) << what << " tail " << l;
    }
  }
}

TEST_P(CudaEngineTest, EntryUnderAPrefixHoldsThePrefillsStateAndLocalKeys) {
  // Seam 0 under a prefix runs the same kernels on the same rows as a forward() continuing that prefix:
  // the entry's states, conv tails and values are the forward's, its keys the forward's rotated back by
  // the block's start (one bf16 rotation).
  const ModelConfig& cfg = cpu_->config();
  CudaSequenceState ctx = gpu_->new_state();
  gpu_->forward(blocks_[0], ctx);
  const int64_t start = ctx.length, n = static_cast<int64_t>(blocks_[2].size());
  const CudaSegmentEntry e = prefill_segment(*gpu_, blocks_[2], 0, &ctx);
  EXPECT_EQ(ctx.length, start) << "the context is not modified";
  gpu_->forward(blocks_[2], ctx);
  const SequenceState ref = ctx.download(cfg);
  const int64_t row = cfg.num_kv_heads * cfg.head_dim;
  for (int l = 0; l < cfg.num_layers; ++l) {
    const std::string what = GetParam() + " layer " + std::to_string(l);
    if (cfg.layer_kinds[l] == LayerKind::LinearAttention) {
      EXPECT_LE(rel_err(download_f32(e.linear[l].full, ref.layers[l].lin.S.size()), ref.layers[l].lin.S), 1e-2f) << what;
      EXPECT_LE(rel_err(download_bf16(e.linear[l].conv_tail, ref.layers[l].lin.conv_tail.size()),
                        ref.layers[l].lin.conv_tail),
                1e-2f)
          << what;
    } else {
      const auto& kv = ref.layers[l].attn;
      std::vector<float> k(kv.k.begin() + start * row, kv.k.begin() + (start + n) * row);
      const std::vector<float> v(kv.v.begin() + start * row, kv.v.begin() + (start + n) * row);
      cpu::rope_shift(k.data(), n, cfg.num_kv_heads, cfg.head_dim, cfg.rotary_dim, -start, cfg.rope_theta);
      EXPECT_LE(rel_err(download_bf16(e.attention[l].k, k.size()), k), 2e-2f) << what << " K";
      EXPECT_LE(rel_err(download_bf16(e.attention[l].v, v.size()), v), 1e-2f) << what << " V";
    }
  }
}

TEST_P(CudaEngineTest, UncachedBlockIsRecomputedAndNeverStored) {
  std::vector<PromptBlock> pb;
  for (auto& b : blocks_) pb.push_back({b, BlockCache::Cache});
  pb[2].cache = BlockCache::None;
  CudaEngine e(*gpu_, CacheMode::Hypic, {});
  e.run(pb);
  CudaPromptResult warm = e.run(pb);
  const int64_t k = static_cast<int64_t>(blocks_.size()) - 1, q = blocks_.back().size();
  EXPECT_EQ(warm.computed_tokens, (k - 2) * 8 + static_cast<int64_t>(blocks_[2].size()) + q);
  EXPECT_FALSE(warm.blocks[2].hit);
  EXPECT_TRUE(warm.blocks[1].hit && warm.blocks[3].hit);
  EXPECT_EQ(e.store().stats().entries, static_cast<size_t>(k - 1));
  pb[2].cache = BlockCache::Cache;
  pb[0].cache = BlockCache::None;
  CudaPromptResult r = e.run(pb);
  EXPECT_EQ(r.state.length, static_cast<int64_t>(concat().size()));
}

TEST_P(CudaEngineTest, BudgetEvictsLeastRecentlyUsedEntries) {
  const size_t one = prefill_segment(*gpu_, blocks_[1], 8).bytes();
  EngineOptions opt;
  opt.cache_budget_bytes = 3 * one;  // about three entries of this size
  CudaEngine e(*gpu_, CacheMode::Hypic, opt);
  e.run(blocks_);  // four cacheable blocks
  const auto s = e.store().stats();
  EXPECT_LE(s.bytes, opt.cache_budget_bytes);
  EXPECT_GT(s.evictions, 0);
  // A pinned block survives the pressure of later prompts.
  const std::vector<int> pinned = block(23, 7);
  e.run(std::vector<PromptBlock>{{pinned, BlockCache::Pin}, {blocks_[4], BlockCache::Cache}});
  for (int i = 0; i < 4; ++i) e.run(std::vector<std::vector<int>>{block(40, 10 + i), block(3, 20)});
  KeyContext ctx{gpu_->fingerprint(), "", 8};
  EXPECT_TRUE(e.store().contains_content(content_key(ctx, pinned)));
  EXPECT_LE(e.store().stats().bytes, opt.cache_budget_bytes);
}

INSTANTIATE_TEST_SUITE_P(Families, CudaEngineTest, ::testing::Values("qwen3_next_moe", "qwen3_5_dense", "qwen3_5_moe"));

}  // namespace
}  // namespace hypic
