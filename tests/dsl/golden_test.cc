// Golden plans: every tests/fixtures/dsl/golden/<name>.yaml with <name>.vars.json compiles to exactly
// <name>.plan.json. Set HYPIC_UPDATE_GOLDENS=1 to rewrite the goldens (then review the diff; refused
// under CI, where a golden written by the code under test would pass whatever that code does). What the
// goldens are checked against independently: their text is the real chat template's rendering of the
// same conversation (jinja2, tests/fixtures/dsl/chat_reference.json, case "golden_<name>") where the
// reference has the case, else the framer that tests/dsl/chat_framing_test.cc checks against it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "dsl/compiler.h"
#include "runtime/text/chat_format.h"
#include "fake_tokenizer.h"

namespace fs = std::filesystem;
using namespace hypic::dsl;

namespace {

const fs::path kGoldenDir = fs::path(HYPIC_SOURCE_DIR) / "tests/fixtures/dsl/golden";

std::string read(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Relative file names keep the goldens' source locations independent of the checkout path.
struct InGoldenDir {
  fs::path saved = fs::current_path();
  InGoldenDir() { fs::current_path(kGoldenDir); }
  ~InGoldenDir() { fs::current_path(saved); }
};

// A case of the jinja2 reference renderings (tests/fixtures/dsl/make_chat_reference.py), or null.
const Json* reference_case(const std::string& name) {
  static const Json ref = Json::parse(read(fs::path(HYPIC_SOURCE_DIR) / "tests/fixtures/dsl/chat_reference.json"));
  for (const auto& c : ref)
    if (c["name"] == name) return &c;
  return nullptr;
}

PromptPlan compile_golden(const std::string& name) {
  InGoldenDir cd;
  const Template t = load_template(name + ".yaml");
  CompileOptions opt;
  test::FakeTokenizer tok;
  opt.tokenizer = &tok;
  opt.model_fingerprint = "golden-model";
  opt.vars_source = name + ".vars.json";
  return compile(t, load_variables(name + ".vars.json"), opt);
}

class Golden : public ::testing::TestWithParam<std::string> {};

TEST_P(Golden, PlanMatches) {
  const std::string name = GetParam();
  const PromptPlan plan = compile_golden(name);
  const std::string got = plan.to_json().dump(1) + "\n";
  const fs::path golden = kGoldenDir / (name + ".plan.json");
  if (std::getenv("HYPIC_UPDATE_GOLDENS")) {
    ASSERT_EQ(std::getenv("CI"), nullptr) << "HYPIC_UPDATE_GOLDENS is refused under CI (CI is set)";
    std::ofstream(golden, std::ios::binary) << got;
    GTEST_SKIP() << "rewrote " << golden;
  }
  ASSERT_TRUE(fs::exists(golden)) << golden << " is missing; run with HYPIC_UPDATE_GOLDENS=1";
  EXPECT_EQ(got, read(golden));
}

TEST_P(Golden, BlocksTileTheChatRendering) {
  const PromptPlan plan = compile_golden(GetParam());
  hypic::Conversation conv;
  conv.tools = plan.tools;
  auto& msgs = conv.messages;
  for (const auto& b : plan.blocks) {
    if (b.message < 0) continue;
    if (size_t(b.message) == msgs.size()) msgs.push_back(hypic::ChatMessage{b.role, "", std::nullopt, {}, {}});
    msgs[size_t(b.message)].content += b.content;
  }
  // The real template's rendering of this golden's conversation, where the reference holds it; else
  // re-frame the messages the plan claims (history blocks carry tool calls we cannot rebuild from it).
  bool has_history = false;
  for (const auto& b : plan.blocks) has_history |= b.kind == "history";
  const Json* ref = reference_case("golden_" + GetParam());
  if (has_history) {
    ASSERT_NE(ref, nullptr) << "a plan with history needs its jinja2 rendering in chat_reference.json";
  }
  if (ref) {
    EXPECT_EQ(plan.text(), (*ref)["rendered"].get<std::string>());
    EXPECT_EQ(plan.text() + plan.generation_prompt, (*ref)["rendered_with_generation_prompt"].get<std::string>());
    EXPECT_EQ(plan.tools, (*ref)["tools"]);
  } else {
    hypic::RenderOptions ro;
    ro.add_generation_prompt = false;
    EXPECT_EQ(plan.text(), hypic::default_chat_format().render(conv, ro).text);
  }
  for (const auto& b : plan.blocks) {
    EXPECT_FALSE(b.text.empty()) << b.id;
    ASSERT_TRUE(b.tokens && b.content_key && b.chain_key) << b.id;
  }
}

std::vector<std::string> golden_names() {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(kGoldenDir))
    if (e.path().extension() == ".yaml") names.push_back(e.path().stem().string());
  std::sort(names.begin(), names.end());
  return names;
}

INSTANTIATE_TEST_SUITE_P(Dsl, Golden, ::testing::ValuesIn(golden_names()),
                         [](const auto& info) { return info.param; });

TEST(GoldenSet, CoversEveryFeature) {
  const auto names = golden_names();
  for (const char* want : {"basic", "repeat", "join", "tools", "history", "include", "sections", "markup", "lint_volatile"})
    EXPECT_NE(std::find(names.begin(), names.end(), want), names.end()) << want;
}

}  // namespace
