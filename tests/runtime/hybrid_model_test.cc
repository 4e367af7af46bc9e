// The CPU forward pass against independent implementations' logits on the tiny fixture models:
// transformers (tools/fixtures/make_tiny_models.py, make_tiny_minimax.py, make_tiny_kimi_linear.py,
// make_tiny_bailing_hybrid.py) and, for Ring's bailing_moe_linear, mlx-lm
// (tools/fixtures/make_tiny_bailing_linear.py). Prefill, prefill + continuation, token-by-token decode — run
// by the engine in full mode (Engine::forward) over the CPU backend.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>

#include "runtime/cpu_backend.h"
#include "runtime/engine.h"
#include "runtime/error.h"
#include "runtime/safetensors.h"

namespace hypic {
namespace {

const std::string kModels = std::string(HYPIC_SOURCE_DIR) + "/tests/fixtures/models/";

struct Golden {
  std::vector<int> ids, ids_short, greedy;
  Tensor logits, logits_short, greedy_logits;
};

std::vector<int> to_ints(const Tensor& t) {
  std::vector<int> v;
  for (int64_t i = 0; i < t.numel(); ++i) v.push_back(static_cast<int>(t.data<int64_t>()[i]));
  return v;
}

Golden load_golden(const std::string& name) {
  auto f = SafetensorsFile::open(kModels + name + "/golden.safetensors");
  Golden g;
  g.ids = to_ints(f->get("input_ids"));
  g.ids_short = to_ints(f->get("input_ids_short"));
  g.greedy = to_ints(f->get("greedy_ids"));
  g.logits = f->get("logits");
  g.logits_short = f->get("logits_short");
  g.greedy_logits = f->get("greedy_logits");
  return g;
}

float max_abs_diff(const float* a, const float* b, int64_t n) {
  float m = 0;
  for (int64_t i = 0; i < n; ++i) m = std::max(m, std::fabs(a[i] - b[i]));
  return m;
}

class ModelGolden : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    backend_ = CpuBackend::load(kModels + GetParam());
    engine_ = std::make_unique<Engine>(*backend_, CacheMode::Full, EngineOptions{});
    g_ = load_golden(GetParam());
    V_ = backend_->config().vocab_size;
  }
  std::unique_ptr<CpuBackend> backend_;
  std::unique_ptr<Engine> engine_;
  Golden g_;
  int64_t V_ = 0;
};

TEST_P(ModelGolden, PrefillMatchesTransformers) {
  auto st = backend_->new_state();
  auto logits = engine_->forward(g_.ids, *st, true);
  ASSERT_EQ(logits.size(), g_.ids.size() * V_);
  EXPECT_LE(max_abs_diff(logits.data(), g_.logits.data<float>(), logits.size()), 1e-3f);

  auto st2 = backend_->new_state();
  auto short_logits = engine_->forward(g_.ids_short, *st2, true);
  EXPECT_LE(max_abs_diff(short_logits.data(), g_.logits_short.data<float>(), short_logits.size()), 1e-3f);
}

TEST_P(ModelGolden, ContinuationMatchesSinglePrefill) {
  // Uneven pieces: a multi-token continuation must carry the conv tail, the linear state and the KV.
  const std::vector<size_t> cuts = {0, 5, 6, 23, g_.ids.size()};
  auto st = backend_->new_state();
  for (size_t c = 0; c + 1 < cuts.size(); ++c) {
    std::vector<int> piece(g_.ids.begin() + cuts[c], g_.ids.begin() + cuts[c + 1]);
    auto logits = engine_->forward(piece, *st, true);
    EXPECT_LE(max_abs_diff(logits.data(), g_.logits.data<float>() + cuts[c] * V_, logits.size()), 1e-3f)
        << "piece " << c;
  }
  EXPECT_EQ(st->length, static_cast<int64_t>(g_.ids.size()));
}

TEST_P(ModelGolden, TokenByTokenDecodeMatches) {
  auto st = backend_->new_state();
  for (size_t t = 0; t < g_.ids.size(); ++t) {
    const int one[1] = {g_.ids[t]};
    auto logits = engine_->forward(one, *st);
    ASSERT_LE(max_abs_diff(logits.data(), g_.logits.data<float>() + t * V_, V_), 1e-3f) << "position " << t;
  }
}

TEST_P(ModelGolden, GreedyGenerationMatches) {
  auto st = backend_->new_state();
  auto logits = engine_->forward(g_.ids, *st);
  for (size_t i = 0; i < g_.greedy.size(); ++i) {
    EXPECT_LE(max_abs_diff(logits.data(), g_.greedy_logits.data<float>() + i * V_, V_), 1e-3f) << "step " << i;
    const int next = static_cast<int>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    ASSERT_EQ(next, g_.greedy[i]) << "step " << i;
    const int one[1] = {next};
    logits = engine_->forward(one, *st);
  }
}

TEST_P(ModelGolden, LongPrefillEqualsDecodeAcrossChunks) {
  // Crosses several 64-token chunks of the chunked delta rule; decode is the recurrent form.
  std::vector<int> ids;
  for (int i = 0; i < 150; ++i) ids.push_back(g_.ids[(i * 7) % g_.ids.size()]);
  auto a = backend_->new_state(), b = backend_->new_state();
  auto full = engine_->forward(ids, *a, true);
  for (size_t t = 0; t < ids.size(); ++t) {
    const int one[1] = {ids[t]};
    auto logits = engine_->forward(one, *b);
    ASSERT_LE(max_abs_diff(logits.data(), full.data() + t * V_, V_), 1e-3f) << "position " << t;
  }
}

TEST_P(ModelGolden, SeveralChunksMatchTransformers) {
  // golden_long.safetensors (tools/fixtures/make_long_goldens.py): transformers over 200 tokens, three
  // whole 64-token chunks of the chunked delta rule and the attention prefill and a part; full rows at
  // chunk edges and every 8th position, the arg-max's logit everywhere. Run as one prefill, in pieces
  // whose cuts fall inside chunks, and token by token.
  auto f = SafetensorsFile::open(kModels + GetParam() + "/golden_long.safetensors");
  const std::vector<int> ids = to_ints(f->get("input_ids")), rows = to_ints(f->get("rows")),
                         top_ids = to_ints(f->get("top1_ids"));
  const Tensor row_logits = f->get("row_logits"), top_logits = f->get("top1_logits");
  const int64_t T = static_cast<int64_t>(ids.size());
  ASSERT_GE(T, 150);
  ASSERT_EQ(static_cast<int64_t>(top_ids.size()), T);
  auto check = [&](const std::vector<float>& all, const std::string& how) {
    ASSERT_EQ(static_cast<int64_t>(all.size()), T * V_) << how;
    for (size_t r = 0; r < rows.size(); ++r)
      ASSERT_LE(max_abs_diff(all.data() + rows[r] * V_, row_logits.data<float>() + r * V_, V_), 1e-3f)
          << how << ", position " << rows[r];
    for (int64_t t = 0; t < T; ++t)
      ASSERT_NEAR(all[t * V_ + top_ids[t]], top_logits.data<float>()[t], 1e-3f) << how << ", position " << t;
  };
  auto a = backend_->new_state();
  check(engine_->forward(ids, *a, true), "one prefill");
  auto b = backend_->new_state();
  std::vector<float> pieces;
  const std::vector<int64_t> cuts = {0, 50, 130, 131, T};
  for (size_t c = 0; c + 1 < cuts.size(); ++c) {
    const std::vector<int> piece(ids.begin() + cuts[c], ids.begin() + cuts[c + 1]);
    const auto l = engine_->forward(piece, *b, true);
    pieces.insert(pieces.end(), l.begin(), l.end());
  }
  check(pieces, "in pieces");
  auto d = backend_->new_state();
  std::vector<float> decode;
  for (int id : ids) {
    const int one[1] = {id};
    const auto l = engine_->forward(one, *d);
    decode.insert(decode.end(), l.begin(), l.end());
  }
  check(decode, "token by token");
}

INSTANTIATE_TEST_SUITE_P(Families, ModelGolden,
                         ::testing::Values("qwen3_next_moe", "qwen3_5_dense", "qwen3_5_moe", "bailing_moe_linear", "minimax",
                                           "kimi_linear", "bailing_hybrid"));

// ---- bad input: clear typed errors, never a crash ----

namespace fs = std::filesystem;

class BadModel : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("hypic_bad_model_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    for (auto& e : fs::directory_iterator(kModels + "qwen3_5_dense")) fs::copy(e.path(), dir_ / e.path().filename());
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string message_of(const std::function<void()>& f) {
    try {
      f();
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  }
  void rewrite_config(const std::function<void(std::string&)>& edit) {
    std::ifstream in(dir_ / "config.json");
    std::string s((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    edit(s);
    std::ofstream(dir_ / "config.json") << s;
  }
  fs::path dir_;
};

TEST_F(BadModel, MissingDirectory) {
  EXPECT_NE(message_of([&] { CpuBackend::load((dir_ / "nope").string()); }).find("does not exist"), std::string::npos);
}

TEST_F(BadModel, TruncatedCheckpointNamesTheFile) {
  fs::resize_file(dir_ / "model.safetensors", fs::file_size(dir_ / "model.safetensors") / 2);
  const std::string m = message_of([&] { CpuBackend::load(dir_.string()); });
  EXPECT_NE(m.find("model.safetensors"), std::string::npos) << m;
  EXPECT_NE(m.find("truncated"), std::string::npos) << m;
}

TEST_F(BadModel, TinyFileHasNoHeader) {
  fs::resize_file(dir_ / "model.safetensors", 3);
  EXPECT_NE(message_of([&] { CpuBackend::load(dir_.string()); }).find("truncated"), std::string::npos);
}

TEST_F(BadModel, UnknownModelType) {
  rewrite_config([](std::string& s) { s.replace(s.find("qwen3_5_text"), 12, "llama"); });
  const std::string m = message_of([&] { CpuBackend::load(dir_.string()); });
  EXPECT_NE(m.find("unsupported model_type 'llama'"), std::string::npos) << m;
}

TEST_F(BadModel, WrongShapeNamesTheTensor) {
  rewrite_config([](std::string& s) {
    const auto p = s.find("\"intermediate_size\": 128");
    ASSERT_NE(p, std::string::npos);
    s.replace(p, 24, "\"intermediate_size\": 96");
  });
  const std::string m = message_of([&] { CpuBackend::load(dir_.string()); });
  EXPECT_NE(m.find("mlp.gate_proj.weight"), std::string::npos) << m;
  EXPECT_NE(m.find("[96, 64]"), std::string::npos) << m;
}

TEST_F(BadModel, BrokenConfigJson) {
  std::ofstream(dir_ / "config.json") << "{ \"model_type\": ";
  EXPECT_NE(message_of([&] { CpuBackend::load(dir_.string()); }).find("config.json"), std::string::npos);
}

TEST_F(BadModel, OversizedPromptNamesTheContextLength) {
  rewrite_config([](std::string& s) {
    const auto p = s.find("\"max_position_embeddings\": 4096");
    ASSERT_NE(p, std::string::npos);
    s.replace(p, 31, "\"max_position_embeddings\": 8");
  });
  auto backend = CpuBackend::load(dir_.string());
  Engine engine(*backend, CacheMode::Full, {});
  auto st = backend->new_state();
  const std::vector<int> six = {1, 2, 3, 4, 5, 6};
  engine.forward(six, *st);  // fits
  try {
    engine.forward(six, *st);  // 12 > 8
    FAIL() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("exceeds the model's context of 8"), std::string::npos) << e.what();
  }
  EXPECT_EQ(st->length, 6);  // the state is untouched by the refused call
}

TEST_F(BadModel, IdOutsideVocabulary) {
  auto backend = CpuBackend::load(dir_.string());
  Engine engine(*backend, CacheMode::Full, {});
  auto st = backend->new_state();
  const std::vector<int> ids = {1, 2, 100000};
  EXPECT_THROW(engine.forward(ids, *st), InvalidArgument);
}

}  // namespace
}  // namespace hypic
