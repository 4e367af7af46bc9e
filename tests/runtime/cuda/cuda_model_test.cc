// The CUDA forward pass (runtime/cuda/cuda_backend.h over CudaModel) on the fixture models against the
// CPU backend (fp32) and transformers' golden logits: prefill, continuation in uneven pieces,
// token-by-token decode, long prefills across delta-rule chunks, and the random-weights path — each run
// by the engine in full mode (Engine::forward). bf16 weights and activations, so the comparison is by
// error relative to the logit range and by top-1 agreement.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "kernels/cuda/check.h"
#include "kernels/cuda/moe_tiled_sm90.h"
#include "kernels/cuda/sm90_host.h"
#include "runtime/cpu_backend.h"
#include "runtime/cuda/cuda_backend.h"
#include "runtime/engine.h"
#include "runtime/error.h"
#include "runtime/model_config.h"
#include "runtime/safetensors.h"
#include "tests/runtime/bf16_agreement.h"

namespace hypic {
namespace {

const std::string kModels = std::string(HYPIC_SOURCE_DIR) + "/tests/fixtures/models/";

using testing_bf16::Agreement;
using testing_bf16::compare;
using testing_bf16::expect_close;
using testing_bf16::Tolerance;

std::vector<int> to_ints(const Tensor& t) {
  std::vector<int> v;
  for (int64_t i = 0; i < t.numel(); ++i) v.push_back(static_cast<int>(t.data<int64_t>()[i]));
  return v;
}

class CudaModelFixture : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (!cuda::device_available()) GTEST_SKIP() << "no CUDA device";
    const std::string dir = kModels + GetParam();
    cpu_ = CpuBackend::load(dir);
    gpu_ = CudaBackend::load(dir);
    cpu_engine_ = std::make_unique<Engine>(*cpu_, CacheMode::Full, EngineOptions{});
    gpu_engine_ = std::make_unique<Engine>(*gpu_, CacheMode::Full, EngineOptions{});
    golden_ = SafetensorsFile::open(dir + "/golden.safetensors");
    ids_ = to_ints(golden_->get("input_ids"));
    logits_ = golden_->get("logits");
    V_ = cpu_->config().vocab_size;
    const testing_bf16::Bounds b = testing_bf16::load_bounds(dir);
    range_ = b.range;
    one_ = b.one;
    two_ = b.two;
  }

  std::unique_ptr<CpuBackend> cpu_;
  std::unique_ptr<CudaBackend> gpu_;
  std::unique_ptr<Engine> cpu_engine_, gpu_engine_;  // full mode: plain forward passes
  std::shared_ptr<SafetensorsFile> golden_;
  std::vector<int> ids_;
  Tensor logits_;
  int64_t V_ = 0;
  float range_ = 1;
  Tolerance one_{}, two_{};  // one bf16 run vs fp32; two bf16 runs vs each other
};

TEST_P(CudaModelFixture, PrefillMatchesCpuAndTransformers) {
  auto st = gpu_->new_state();
  const auto gpu = gpu_engine_->forward(ids_, *st, true);
  ASSERT_EQ(gpu.size(), ids_.size() * V_);
  EXPECT_EQ(st->length, static_cast<int64_t>(ids_.size()));
  auto cst = cpu_->new_state();
  const auto cpu = cpu_engine_->forward(ids_, *cst, true);
  const int64_t T = static_cast<int64_t>(ids_.size());
  expect_close(compare(gpu.data(), cpu.data(), T, V_, range_), one_, GetParam() + " prefill vs cpu");
  expect_close(compare(gpu.data(), logits_.data<float>(), T, V_, range_), one_, GetParam() + " prefill vs golden");

  // Last-token logits alone are the last row of the full output.
  auto st2 = gpu_->new_state();
  const auto last = gpu_engine_->forward(ids_, *st2);
  ASSERT_EQ(last.size(), static_cast<size_t>(V_));
  expect_close(compare(last.data(), gpu.data() + (T - 1) * V_, 1, V_, range_), Tolerance{1e-3f, 1e-4f, 1.0},
               GetParam() + " last row");
}

TEST_P(CudaModelFixture, StateMatchesCpu) {
  auto st = gpu_->new_state();
  gpu_engine_->forward(ids_, *st);
  auto cst_handle = cpu_->new_state();
  cpu_engine_->forward(ids_, *cst_handle);
  const SequenceState& cst = cpu_state(*cst_handle);
  const SequenceState g = cuda_state(*st).download(cpu_->config());
  ASSERT_EQ(g.length, cst.length);
  for (size_t l = 0; l < g.layers.size(); ++l) {
    if (cpu_->config().layer_kinds[l] == LayerKind::LinearAttention) {
      const auto& a = g.layers[l].lin.S;
      const auto& b = cst.layers[l].lin.S;
      float mx = 0, ref = 1e-6f;
      for (size_t i = 0; i < a.size(); ++i) {
        mx = std::max(mx, std::fabs(a[i] - b[i]));
        ref = std::max(ref, std::fabs(b[i]));
      }
      EXPECT_LE(mx / ref, 0.05f) << "linear state of layer " << l;
    } else {
      EXPECT_EQ(g.layers[l].attn.pos, cst.layers[l].attn.pos) << "KV positions of layer " << l;
    }
  }
}

TEST_P(CudaModelFixture, ContinuationInPieces) {
  // Uneven pieces: decode-sized, one token, a chunked piece (17 tokens) on a non-zero state, the rest.
  const std::vector<size_t> cuts = {0, 5, 6, 23, ids_.size()};
  // Judged over the whole sequence, like the bf16 reference (errors grow toward the end of a prompt,
  // so the last piece alone would be held to the whole prompt's mean).
  auto st = gpu_->new_state();
  std::vector<float> all;
  for (size_t c = 0; c + 1 < cuts.size(); ++c) {
    const std::vector<int> piece(ids_.begin() + cuts[c], ids_.begin() + cuts[c + 1]);
    const auto logits = gpu_engine_->forward(piece, *st, true);
    ASSERT_EQ(logits.size(), piece.size() * V_);
    all.insert(all.end(), logits.begin(), logits.end());
  }
  EXPECT_EQ(st->length, static_cast<int64_t>(ids_.size()));
  expect_close(compare(all.data(), logits_.data<float>(), static_cast<int64_t>(ids_.size()), V_, range_), one_,
               GetParam() + " continuation in pieces vs golden");
}

TEST_P(CudaModelFixture, TokenByTokenDecode) {
  auto st = gpu_->new_state();
  std::vector<float> all;
  for (int id : ids_) {
    const int one[1] = {id};
    const auto logits = gpu_engine_->forward(one, *st);
    all.insert(all.end(), logits.begin(), logits.end());
  }
  expect_close(compare(all.data(), logits_.data<float>(), static_cast<int64_t>(ids_.size()), V_, range_), one_,
               GetParam() + " decode vs golden");
}

TEST_P(CudaModelFixture, LongPrefillAcrossChunksMatchesCpuAndDecode) {
  // 150 tokens: three 64-token chunks of the chunked delta rule and the flash attention prefill; then the
  // same tokens one by one (recurrent delta rule, split-key attention decode, KV growth past 256 rows).
  std::vector<int> ids;
  for (int i = 0; i < 300; ++i) ids.push_back(ids_[(i * 7) % ids_.size()]);
  const std::vector<int> head(ids.begin(), ids.begin() + 150);
  auto a = gpu_->new_state();
  const auto gpu = gpu_engine_->forward(head, *a, true);
  auto c = cpu_->new_state();
  const auto cpu = cpu_engine_->forward(head, *c, true);
  expect_close(compare(gpu.data(), cpu.data(), 150, V_, range_), one_, GetParam() + " 150-token prefill vs cpu");

  auto b = gpu_->new_state();
  std::vector<float> dec;
  for (int id : ids) {
    const int one[1] = {id};
    const auto logits = gpu_engine_->forward(one, *b);
    dec.insert(dec.end(), logits.begin(), logits.end());
  }
  expect_close(compare(dec.data(), gpu.data(), 150, V_, range_), two_, GetParam() + " decode vs prefill (150)");
  // Positions 150..299 continue the prefilled state with a second long piece.
  const std::vector<int> tail(ids.begin() + 150, ids.end());
  const auto cont = gpu_engine_->forward(tail, *a, true);
  expect_close(compare(cont.data(), dec.data() + 150 * V_, 150, V_, range_), two_,
               GetParam() + " continuation vs decode");
}

TEST_P(CudaModelFixture, GraphDecodeEqualsLaunchedDecode) {
  // 250 prompt tokens, then 24 steps: the KV cache outgrows its 256 rows on the way (the graph is
  // captured again), and two sequences take turns.
  std::vector<int> ids;
  for (int i = 0; i < 274; ++i) ids.push_back(ids_[(i * 5) % ids_.size()]);
  const std::vector<int> head(ids.begin(), ids.begin() + 250);
  CudaModel& model = gpu_->model();
  auto a = gpu_->new_state();
  gpu_engine_->forward(head, *a);
  auto b = gpu_->clone(*a), c = gpu_->clone(*a);
  model.set_decode_graphs(false);
  std::vector<std::vector<float>> launched;
  for (int i = 250; i < 274; ++i) {
    const int one[1] = {ids[i]};
    launched.push_back(gpu_engine_->forward(one, *c));
  }
  model.set_decode_graphs(true);
  for (int i = 250; i < 274; ++i) {
    const int one[1] = {ids[i]};
    for (State* st : {a.get(), b.get()}) {
      const auto g = gpu_engine_->forward(one, *st);
      const auto& l = launched[i - 250];
      float worst = 0;
      for (int64_t v = 0; v < V_; ++v) worst = std::max(worst, std::fabs(g[v] - l[v]));
      EXPECT_LE(worst, 1e-4f * range_) << GetParam() << " step " << i;
      EXPECT_EQ(std::max_element(g.begin(), g.end()) - g.begin(), std::max_element(l.begin(), l.end()) - l.begin());
    }
  }
  EXPECT_EQ(a->length, 274);
  EXPECT_EQ(b->length, 274);
  // One graph per sequence, captured again when its cache grows past 256 rows: a and b take turns on
  // their own graphs instead of capturing at every switch.
  EXPECT_TRUE(model.decode_graphs());
  // The other families take the launched step (no graph): the same logits, nothing captured.
  EXPECT_EQ(model.decode_graph_captures(), model.qwen_layers() ? 4 : 0);
}

// Continuous batching (CudaModel::decode_batch through Engine::decode_batch): five sequences of
// different lengths decoded together, a different subset at every other step (one sequence sits out), one
// cache outgrowing 256 rows on the way; every sequence's logits agree with its own one-token steps, with
// the batched step replayed from graphs and launched.
TEST_P(CudaModelFixture, BatchedDecodeMatchesEachSequenceAlone) {
  CudaModel& model = gpu_->model();
  for (const bool graphs : {true, false}) {
    const std::vector<int64_t> lens = {10, 100, 250, 3, 40};
    const int64_t S = static_cast<int64_t>(lens.size()), steps = 16;
    std::vector<std::unique_ptr<State>> alone, batched;
    for (int64_t s = 0; s < S; ++s) {
      std::vector<int> p;
      for (int64_t i = 0; i < lens[s]; ++i) p.push_back(ids_[(i * 7 + s * 13) % ids_.size()]);
      alone.push_back(gpu_->new_state());
      gpu_engine_->forward(p, *alone.back());
      batched.push_back(gpu_->clone(*alone.back()));
    }
    std::vector<std::vector<float>> got(S), want(S);
    std::vector<std::vector<int>> tokens(S);
    for (int64_t s = 0; s < S; ++s)
      for (int64_t t = 0; t < steps; ++t) tokens[s].push_back(ids_[(t * 11 + s * 3 + 1) % ids_.size()]);
    std::vector<int64_t> next(S, 0);
    model.set_decode_graphs(graphs);
    const int64_t captures0 = model.batch_graph_captures();
    for (int64_t step = 0; step < steps + 2; ++step) {
      std::vector<State*> sts;
      std::vector<int> tok;
      std::vector<int64_t> who;
      for (int64_t s = 0; s < S; ++s) {
        if (step % 2 == 1 && s == (step / 2) % S) continue;  // sits out this step
        if (next[s] >= steps) continue;
        sts.push_back(batched[s].get());
        tok.push_back(tokens[s][next[s]]);
        who.push_back(s);
      }
      if (sts.empty()) break;
      const std::vector<float> out = gpu_engine_->decode_batch(sts, tok);
      ASSERT_EQ(out.size(), sts.size() * V_);
      for (size_t j = 0; j < who.size(); ++j) {
        got[who[j]].insert(got[who[j]].end(), out.begin() + j * V_, out.begin() + (j + 1) * V_);
        ++next[who[j]];
      }
    }
    model.set_decode_graphs(false);
    for (int64_t s = 0; s < S; ++s) {
      for (int64_t t = 0; t < next[s]; ++t) {
        const int one[1] = {tokens[s][t]};
        const auto l = gpu_engine_->forward(one, *alone[s]);
        want[s].insert(want[s].end(), l.begin(), l.end());
      }
      EXPECT_EQ(batched[s]->length, alone[s]->length);
      expect_close(compare(got[s].data(), want[s].data(), next[s], V_, range_), two_,
                   GetParam() + (graphs ? " graph" : " launched") + " batched seq " + std::to_string(s));
    }
    model.set_decode_graphs(true);
    if (!model.qwen_layers()) {
      EXPECT_EQ(model.batch_graph_captures(), 0);  // a lane per sequence
    } else if (graphs) {
      EXPECT_GT(model.batch_graph_captures(), captures0) << "the batched step was never captured";
    }
  }
}

TEST_P(CudaModelFixture, RejectsIdsOutsideTheVocabulary) {
  auto st = gpu_->new_state();
  const std::vector<int> bad = {1, 2, static_cast<int>(V_)};
  EXPECT_THROW(gpu_engine_->forward(bad, *st), InvalidArgument);
  EXPECT_THROW(gpu_engine_->forward(std::vector<int>{}, *st), InvalidArgument);
  EXPECT_EQ(st->length, 0);
}

TEST_P(CudaModelFixture, RandomWeightsOfTheFixtureShape) {
  // The random-weights path: finite O(1) logits, and prefill agrees with token-by-token decode.
  auto rnd = CudaBackend::random(cpu_->config(), 1234);
  Engine engine(*rnd, CacheMode::Full, {});
  std::vector<int> ids;
  for (int i = 0; i < 40; ++i) ids.push_back((i * 37 + 11) % static_cast<int>(V_));
  auto a = rnd->new_state(), b = rnd->new_state();
  const auto full = engine.forward(ids, *a, true);
  float mx = 0;
  for (float x : full) {
    ASSERT_TRUE(std::isfinite(x));
    mx = std::max(mx, std::fabs(x));
  }
  EXPECT_GT(mx, 1e-2f);
  EXPECT_LT(mx, 100.0f);
  std::vector<float> dec;
  for (int id : ids) {
    const int one[1] = {id};
    const auto logits = engine.forward(one, *b);
    dec.insert(dec.end(), logits.begin(), logits.end());
  }
  const auto [lo, hi] = std::minmax_element(full.begin(), full.end());
  expect_close(compare(dec.data(), full.data(), 40, V_, *hi - *lo), two_, GetParam() + " random: decode vs prefill");
}

// A 600-token prompt of spread-out ids (`salt` varies it between tests).
std::vector<int> long_prompt(int64_t vocab, int salt) {
  std::vector<int> ids;
  for (int i = 0; i < 600; ++i) ids.push_back((i * 7919 + salt) % static_cast<int>(vocab));
  return ids;
}

// Full-mode logits of every row of `ids` from a fresh state.
std::vector<float> full_logits(CudaBackend& model, const std::vector<int>& ids) {
  Engine e(model, CacheMode::Full, {});
  auto st = model.new_state();
  return e.forward(ids, *st, true);
}

// Full-mode logits of `ids` with the kernel switch `var` set to `value` (the switches are read at every launch).
std::vector<float> logits_with_switch(CudaBackend& model, const std::vector<int>& ids, const char* var, const char* value) {
  setenv(var, value, 1);
  auto logits = full_logits(model, ids);
  unsetenv(var);
  return logits;
}

// A random model of `cfg` built with the environment variables `env` set (switches read when the model is made).
std::unique_ptr<CudaBackend> random_model_with_env(const ModelConfig& cfg, uint64_t seed,
                                                   const std::vector<std::pair<const char*, const char*>>& env) {
  for (const auto& [var, value] : env) setenv(var, value, 1);
  auto m = CudaBackend::random(cfg, seed);
  for (const auto& [var, value] : env) unsetenv(var);
  return m;
}

// A long prefill's MoE on the tiled tensor-core GEMMs (moe_tiled.h) against cuBLAS's grouped GEMM, one
// random model of the Qwen3.5 MoE fixture's layout widened to a shape the tiled kernels take (hidden 128,
// expert width 64). HYPIC_CUDA_MOE_DEVICE_ROWS=0 sends every MoE above the few-row kernels down the
// long-prefill path, so a 600-token prompt (1200 routed rows) takes it in every layer.
TEST(CudaModelMoe, TiledPrefillMatchesGroupedGemm) {
  if (!cuda::device_available()) GTEST_SKIP() << "no CUDA device";
  const std::string dir = kModels + "qwen3_5_moe";
  ModelConfig cfg = ModelConfig::load(dir + "/config.json");
  cfg.hidden_size = 128;
  cfg.moe_intermediate_size = 64;
  const testing_bf16::Bounds b = testing_bf16::load_bounds(dir);
  auto tiled = random_model_with_env(cfg, 77, {{"HYPIC_CUDA_MOE_DEVICE_ROWS", "0"}, {"HYPIC_CUDA_MOE_TILED", "1"}});
  auto cublas = random_model_with_env(cfg, 77, {{"HYPIC_CUDA_MOE_DEVICE_ROWS", "0"}, {"HYPIC_CUDA_MOE_TILED", "0"}});
  const std::vector<int> ids = long_prompt(cfg.vocab_size, 13);
  const auto a = full_logits(*tiled, ids), r = full_logits(*cublas, ids);
  ASSERT_EQ(a.size(), r.size());
  const auto [lo, hi] = std::minmax_element(r.begin(), r.end());
  const int64_t T = static_cast<int64_t>(ids.size());
  expect_close(compare(a.data(), r.data(), T, cfg.vocab_size, *hi - *lo), b.two, "tiled MoE vs grouped GEMM");
  // The two paths round differently (cuBLAS's gate/up output is bf16 before SwiGLU): identical logits
  // would mean the tiled kernels never ran.
  EXPECT_NE(a, r);
}

// The attention layers at head dim 256 on the Hopper kernel (TMA + wgmma, kernels/cuda/attention_prefill_sm90.h)
// against the mma.sync kernel, through a whole forward pass: one random model of the Qwen3.5 MoE fixture's
// layout with its attention heads widened to 256 dimensions, a 600-token prompt (5 query tiles x 4 heads, so
// the engine's attention takes the split form). The fixture heads (32 dimensions) never reach that kernel.
TEST(CudaModelAttention, HopperPrefillMatchesMmaSync) {
  if (!cuda::device_available()) GTEST_SKIP() << "no CUDA device";
  if (!cuda::current_device_is_sm90()) GTEST_SKIP() << "the Hopper kernel needs compute capability 9.0";
  const std::string dir = kModels + "qwen3_5_moe";
  ModelConfig cfg = ModelConfig::load(dir + "/config.json");
  cfg.head_dim = 256;
  const testing_bf16::Bounds b = testing_bf16::load_bounds(dir);
  auto model = CudaBackend::random(cfg, 78);
  const std::vector<int> ids = long_prompt(cfg.vocab_size, 29);
  const auto a = logits_with_switch(*model, ids, "HYPIC_CUDA_ATTN_SM90", "1");
  const auto r = logits_with_switch(*model, ids, "HYPIC_CUDA_ATTN_SM90", "0");
  ASSERT_EQ(a.size(), r.size());
  const auto [lo, hi] = std::minmax_element(r.begin(), r.end());
  const int64_t T = static_cast<int64_t>(ids.size());
  expect_close(compare(a.data(), r.data(), T, cfg.vocab_size, *hi - *lo), b.two, "Hopper vs mma.sync attention");
  // The kernels sum in different orders: identical logits would mean the Hopper kernel never ran.
  EXPECT_NE(a, r);
}

// The Qwen3.5 MoE fixture's layout widened to hidden 256 and expert width 128, the narrowest shape the Hopper
// MoE kernels take (kernels/cuda/moe_tiled_sm90.h).
ModelConfig hopper_moe_config() {
  ModelConfig cfg = ModelConfig::load(kModels + "qwen3_5_moe/config.json");
  cfg.hidden_size = 256;
  cfg.moe_intermediate_size = 128;
  return cfg;
}

// The long prefill's MoE on the Hopper expert GEMMs (wgmma + TMA, kernels/cuda/moe_tiled_sm90.h) against the
// mma.sync tiled kernels, through a whole forward pass: the Qwen3.5 MoE fixture's layout widened to hidden
// 256 and expert width 128 (the narrowest shape the Hopper kernels take), a 600-token prompt whose 1200
// routed rows take the long-prefill path in every layer (HYPIC_CUDA_MOE_DEVICE_ROWS=0).
TEST(CudaModelMoe, TiledPrefillHopperMatchesMmaSync) {
  if (!cuda::device_available()) GTEST_SKIP() << "no CUDA device";
  if (!cuda::current_device_is_sm90()) GTEST_SKIP() << "the Hopper kernels need compute capability 9.0";
  ModelConfig cfg = hopper_moe_config();
  const testing_bf16::Bounds b = testing_bf16::load_bounds(kModels + "qwen3_5_moe");
  auto model = random_model_with_env(cfg, 79, {{"HYPIC_CUDA_MOE_DEVICE_ROWS", "0"}});
  ASSERT_TRUE(cuda::moe_tiled_sm90_gate_up_applies(cfg.hidden_size, cfg.moe_intermediate_size));
  ASSERT_TRUE(cuda::moe_tiled_sm90_down_applies(cfg.hidden_size, cfg.moe_intermediate_size));
  const std::vector<int> ids = long_prompt(cfg.vocab_size, 31);
  const auto a = logits_with_switch(*model, ids, "HYPIC_CUDA_MOE_SM90", "1");
  const auto r = logits_with_switch(*model, ids, "HYPIC_CUDA_MOE_SM90", "0");
  ASSERT_EQ(a.size(), r.size());
  const auto [lo, hi] = std::minmax_element(r.begin(), r.end());
  const int64_t T = static_cast<int64_t>(ids.size());
  expect_close(compare(a.data(), r.data(), T, cfg.vocab_size, *hi - *lo), b.two, "Hopper vs mma.sync MoE GEMMs");
  // Both forms sum the same k16 tensor-core products in the same k order, so the logits agree bit for bit
  // (measured on an H200; the ASSERTs above show the Hopper kernels take this shape).
  EXPECT_EQ(a, r);
}

// Batched decode with its MoE on the Hopper tiled kernels (CudaModel::tiled_moe_first): the Qwen3.5 MoE
// fixture widened to a shape they take, every expert routed (top-8 of 8), batches of 8 and 20 sequences
// (64 and 160 routed rows a step: what the few-row and the expert-major kernels took before). The step
// replayed from a captured graph gives what the launched step gives, and both agree with the kernels the
// tiled ones replace (HYPIC_CUDA_MOE_DEVICE_ROWS set: the tiled kernels off).
TEST(CudaModelMoe, BatchedDecodeTiledMoeGraphMatchesLaunched) {
  if (!cuda::device_available()) GTEST_SKIP() << "no CUDA device";
  if (!cuda::current_device_is_sm90()) GTEST_SKIP() << "the Hopper kernels need compute capability 9.0";
  ModelConfig cfg = hopper_moe_config();
  cfg.experts_per_tok = cfg.num_experts;
  const testing_bf16::Bounds b = testing_bf16::load_bounds(kModels + "qwen3_5_moe");
  auto tiled = random_model_with_env(cfg, 81, {});
  auto major = random_model_with_env(cfg, 81, {{"HYPIC_CUDA_MOE_DEVICE_ROWS", "4096"}});
  ASSERT_TRUE(cuda::moe_tiled_sm90_gate_up_applies(cfg.hidden_size, cfg.moe_intermediate_size));
  ASSERT_TRUE(cuda::moe_tiled_sm90_down_applies(cfg.hidden_size, cfg.moe_intermediate_size));
  const int64_t steps = 4, V = cfg.vocab_size;
  for (const int64_t S : {int64_t{8}, int64_t{20}}) {
  SCOPED_TRACE("batch " + std::to_string(S));
  ASSERT_TRUE(tiled->model().tiled_moe_first(S)) << "the batch must take the tiled kernels";
  ASSERT_FALSE(major->model().tiled_moe_first(S));
  auto run = [&](CudaBackend& m, bool graphs) {
    Engine e(m, CacheMode::Full, {});
    std::vector<std::unique_ptr<State>> sts;
    for (int64_t s = 0; s < S; ++s) {
      std::vector<int> p;
      for (int64_t i = 0; i < 5 + 3 * s; ++i) p.push_back(static_cast<int>((i * 37 + s * 11) % V));
      sts.push_back(m.new_state());
      e.forward(p, *sts.back());
    }
    m.model().set_decode_graphs(graphs);
    std::vector<float> out;
    for (int64_t t = 0; t < steps; ++t) {
      std::vector<State*> ptrs;
      std::vector<int> tok;
      for (int64_t s = 0; s < S; ++s) {
        ptrs.push_back(sts[s].get());
        tok.push_back(static_cast<int>((t * 53 + s * 7 + 1) % V));
      }
      const std::vector<float> l = e.decode_batch(ptrs, tok);
      out.insert(out.end(), l.begin(), l.end());
    }
    m.model().set_decode_graphs(true);
    return out;
  };
  const int64_t captures0 = tiled->model().batch_graph_captures();
  const auto graph = run(*tiled, true);
  EXPECT_GT(tiled->model().batch_graph_captures(), captures0) << "the batched step was never captured";
  const auto launched = run(*tiled, false);
  const auto ref = run(*major, false);
  ASSERT_EQ(graph.size(), launched.size());
  ASSERT_EQ(ref.size(), launched.size());
  const auto [lo, hi] = std::minmax_element(ref.begin(), ref.end());
  const int64_t rows = S * steps;
  expect_close(compare(graph.data(), launched.data(), rows, V, *hi - *lo), b.two, "tiled MoE: graph vs launched");
  expect_close(compare(launched.data(), ref.data(), rows, V, *hi - *lo), b.two, "tiled vs few-row / expert-major MoE");
  }
}

// The prefill's fused kernels (HYPIC_CUDA_PREFILL_FUSION, default on: the conv writing the split q / k / v, the
// MoE's residual add norming the next layer's input) against the unfused ones through a whole forward: the
// Qwen3.5 MoE fixture's layout at hidden 256 (a row the one-pass norm takes) and expert width 128, a
// 600-token prompt on the long-prefill MoE path in every layer. The norm gives the same bits either way and
// the conv's split sums its 16-channel head norms in another order (the ops test checks both kernels): the
// logits may agree bit for bit, and must agree within the bf16 bound.
TEST(CudaModelPrefill, FusedKernelsMatchUnfused) {
  if (!cuda::device_available()) GTEST_SKIP() << "no CUDA device";
  ModelConfig cfg = hopper_moe_config();
  const testing_bf16::Bounds b = testing_bf16::load_bounds(kModels + "qwen3_5_moe");
  auto fused = random_model_with_env(cfg, 80, {{"HYPIC_CUDA_MOE_DEVICE_ROWS", "0"}, {"HYPIC_CUDA_PREFILL_FUSION", "1"}});
  auto plain = random_model_with_env(cfg, 80, {{"HYPIC_CUDA_MOE_DEVICE_ROWS", "0"}, {"HYPIC_CUDA_PREFILL_FUSION", "0"}});
  const std::vector<int> ids = long_prompt(cfg.vocab_size, 37);
  Engine ef(*fused, CacheMode::Full, {}), ep(*plain, CacheMode::Full, {});
  auto sf = fused->new_state(), sp = plain->new_state();
  const auto a = ef.forward(ids, *sf, true), r = ep.forward(ids, *sp, true);
  ASSERT_EQ(a.size(), r.size());
  const auto [lo, hi] = std::minmax_element(r.begin(), r.end());
  const int64_t T = static_cast<int64_t>(ids.size());
  expect_close(compare(a.data(), r.data(), T, cfg.vocab_size, *hi - *lo), b.two, "fused vs unfused prefill");
  // Decode continues from either prefill's state alike.
  const int one[1] = {ids[5]};
  const auto da = ef.forward(one, *sf), dr = ep.forward(one, *sp);
  const auto [dlo, dhi] = std::minmax_element(dr.begin(), dr.end());
  expect_close(compare(da.data(), dr.data(), 1, cfg.vocab_size, *dhi - *dlo), b.two, "decode after the prefill");
}

INSTANTIATE_TEST_SUITE_P(Families, CudaModelFixture,
                         ::testing::Values("qwen3_next_moe", "qwen3_5_dense", "qwen3_5_moe", "bailing_moe_linear",
                                           "minimax", "kimi_linear", "bailing_hybrid"));

}  // namespace
}  // namespace hypic
