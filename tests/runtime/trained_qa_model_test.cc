// The shipped trained models (examples/models/hypic-qa-tiny, and hypic-qa-long / hypic-agent-tiny where
// installed; tools/train/) against transformers: the committed goldens (tools/train/make_goldens.py) hold
// transformers' greedy answers on evaluation prompts; hypic's tokenizer must give the same prompt ids and
// its forward pass the same greedy tokens, and the answers must be the right ones. The caching engine's
// full and hypic modes answer them too. hypic-qa-tiny is always there; the two models of tools/train's
// `--recipe all` are tested once their folders (with golden.json) are installed.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>

#include "runtime/cpu_backend.h"
#include "runtime/engine.h"
#include "runtime/text/tokenizer.h"

namespace hypic {
namespace {


struct Case {
  std::vector<std::string> blocks;
  std::string answer;
  std::vector<int> input_ids, greedy_ids;
  std::vector<std::pair<int, float>> first_top5;
};

struct Goldens {
  std::vector<Case> cases;
  float tol = 1e-3f;
};

Goldens load_goldens(const std::string& dir) {
    std::ifstream f(dir + "/golden.json");
    EXPECT_TRUE(f.good()) << dir << "/golden.json";
    const auto j = nlohmann::json::parse(f);
    Goldens out;
    out.tol = j.at("tolerance_first_top5_logit").get<float>();
    for (const auto& c : j.at("cases")) {
      Case k;
      k.blocks = c.at("blocks").get<std::vector<std::string>>();
      k.answer = c.at("answer").get<std::string>();
      k.input_ids = c.at("input_ids").get<std::vector<int>>();
      k.greedy_ids = c.at("greedy_ids").get<std::vector<int>>();
      for (const auto& t : c.at("first_top5")) k.first_top5.emplace_back(t.at(0).get<int>(), t.at(1).get<float>());
      out.cases.push_back(std::move(k));
    }
    return out;
}

std::string model_dir(const std::string& name) { return std::string(HYPIC_SOURCE_DIR) + "/examples/models/" + name; }

// hypic-qa-tiny, and the models of tools/train's `--recipe all` that are installed (with their goldens).
std::vector<std::string> installed_models() {
  std::vector<std::string> out = {"hypic-qa-tiny"};
  for (const char* m : {"hypic-qa-long", "hypic-agent-tiny"})
    if (std::filesystem::exists(model_dir(m) + "/golden.json")) out.push_back(m);
  return out;
}

// One model folder: its weights, tokenizer and goldens, loaded once per test program.
struct Loaded {
  std::unique_ptr<CpuBackend> backend;
  std::unique_ptr<Tokenizer> tok;
  Goldens goldens;
};

class TrainedQaModel : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    dir_ = model_dir(GetParam());
    static std::map<std::string, Loaded> cache;
    Loaded& l = cache[dir_];
    if (!l.backend) {
      l.backend = CpuBackend::load(dir_);
      l.tok = std::make_unique<Tokenizer>(Tokenizer::from_file(dir_ + "/tokenizer.json"));
      l.goldens = load_goldens(dir_);
    }
    backend_ = l.backend.get();
    tok_ = l.tok.get();
    goldens_ = &l.goldens;
  }
  const Goldens& goldens() const { return *goldens_; }
  std::vector<std::vector<int>> encode_blocks(const Case& c) const {
    std::vector<std::vector<int>> out;
    for (const auto& b : c.blocks) out.push_back(tok_->encode(b));
    return out;
  }
  std::string answer_text(const std::vector<int>& ids) const {
    const int im_end = *tok_->token_to_id("<|im_end|>");
    auto end = std::find(ids.begin(), ids.end(), im_end);
    std::string s = tok_->decode(std::vector<int>(ids.begin(), end));
    const auto b = s.find_first_not_of(" \t\r\n");
    return b == std::string::npos ? "" : s.substr(b, s.find_last_not_of(" \t\r\n") - b + 1);
  }
  static int argmax(const std::vector<float>& v) {
    return static_cast<int>(std::max_element(v.begin(), v.end()) - v.begin());
  }
  std::string dir_;
  CpuBackend* backend_ = nullptr;
  Tokenizer* tok_ = nullptr;
  const Goldens* goldens_ = nullptr;
};

TEST_P(TrainedQaModel, IsTheRealArchitectureAndSmall) {
  const ModelConfig& c = backend_->config();
  EXPECT_EQ(c.text_model_type, "qwen3_next");
  EXPECT_EQ(c.num_layers, 8);
  EXPECT_GT(c.num_experts, 1);
  EXPECT_GT(c.shared_expert_intermediate_size, 0);
  EXPECT_LT(c.rotary_dim, c.head_dim);  // partial RoPE
  EXPECT_EQ(c.vocab_size, static_cast<int64_t>(tok_->vocab_size()));
  uintmax_t bytes = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir_)) bytes += e.file_size();
  EXPECT_LE(bytes, 20u * 1000 * 1000) << "the shipped model must stay within 20 MB";
}

TEST_P(TrainedQaModel, TokenizerGivesTheGoldenPromptIds) {
  ASSERT_FALSE(goldens().cases.empty());
  for (const auto& c : goldens().cases) {
    std::vector<int> ids;
    for (const auto& b : encode_blocks(c)) ids.insert(ids.end(), b.begin(), b.end());
    EXPECT_EQ(ids, c.input_ids) << c.blocks.back();
  }
}

TEST_P(TrainedQaModel, GreedyAnswersMatchTransformers) {
  Engine engine(*backend_, CacheMode::Full, {});
  for (const auto& c : goldens().cases) {
    auto st = backend_->new_state();
    std::vector<float> logits = engine.forward(c.input_ids, *st);
    for (const auto& [id, v] : c.first_top5)
      EXPECT_NEAR(logits[id], v, goldens().tol * std::max(1.0f, std::fabs(v))) << "token " << id;
    std::vector<int> gen;
    for (size_t t = 0; t < c.greedy_ids.size(); ++t) {
      const int next = argmax(logits);
      gen.push_back(next);
      if (t + 1 < c.greedy_ids.size()) logits = engine.forward(std::vector<int>{next}, *st);
    }
    EXPECT_EQ(gen, c.greedy_ids) << c.blocks.back();
    EXPECT_EQ(answer_text(gen), c.answer);
  }
}

// The caching modes on the question-answering models, whose prompts are several document blocks (the agent
// model's goldens are one rendered block each: every mode is the same computation there).
class TrainedQaModelEngine : public TrainedQaModel {};

TEST_P(TrainedQaModelEngine, EngineFullAndHypicModesAnswer) {
  EngineOptions opt;
  Engine full(*backend_, CacheMode::Full, opt), pic(*backend_, CacheMode::Hypic, opt);
  int pic_right = 0;
  for (const auto& c : goldens().cases) {
    const auto blocks = encode_blocks(c);
    PromptResult r = full.run(blocks);
    const auto toks = full.greedy_decode(r, static_cast<int>(c.greedy_ids.size()));
    EXPECT_EQ(toks, c.greedy_ids);
    pic.run(blocks);  // cold: fills the segment store
    PromptResult h = pic.run(blocks);  // warm: every document block is a hit
    pic_right += answer_text(pic.greedy_decode(h, static_cast<int>(c.greedy_ids.size()))) == c.answer;
  }
  // hypic mode approximates full recompute above layer 0 (DESIGN §1.3); docs/quality.md has its accuracy.
  EXPECT_GE(pic_right * 4, static_cast<int>(goldens().cases.size()) * 3);
}

std::string param_name(const ::testing::TestParamInfo<std::string>& i) {
  std::string n = i.param;
  std::replace(n.begin(), n.end(), '-', '_');
  return n;
}

std::vector<std::string> qa_models() {
  std::vector<std::string> out;
  for (const auto& m : installed_models())
    if (m != "hypic-agent-tiny") out.push_back(m);
  return out;
}

INSTANTIATE_TEST_SUITE_P(ShippedModels, TrainedQaModel, ::testing::ValuesIn(installed_models()), param_name);
INSTANTIATE_TEST_SUITE_P(ShippedModels, TrainedQaModelEngine, ::testing::ValuesIn(qa_models()), param_name);

}  // namespace
}  // namespace hypic
