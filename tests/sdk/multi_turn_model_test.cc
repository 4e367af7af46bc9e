// Exact multi-turn conversations with tool calls, on every device (the CPU always, CUDA where built and
// present), on the shipped QA model: eight turns, each a tool call and its result followed by a real
// (greedy) answer, the history kept in SQLite and rendered by the template. From turn 2 on, the prompt
// extends what the agent's session already ran, so prefix and hypic mode compute exactly the new tokens
// (reused = the previous transcript), and every answer equals the answer under full recompute.
#include <gtest/gtest.h>

#include "runtime/backends.h"
#include "sdk/agent.h"
#include "sdk/builtin_tools.h"
#include "tests/sdk/temp_dir.h"

namespace hypic::sdk {
namespace {

const std::string kRoot = HYPIC_SOURCE_DIR;

struct Turn {
  std::string answer;
  std::vector<StepReport> steps;
  int64_t prompt_tokens = 0;
};

// Step 1 of every turn calls the calculator (scripted, run through the model like a sampled reply);
// later steps are the model's own greedy answer.
Agent::Generator tool_then_answer() {
  auto step = std::make_shared<int>(0);
  return [step](Session& s, const GenerateOptions& opt) {
    if ((*step)++ % 2 == 0) {
      Generation g;
      g.text = "<tool_call>\n{\"name\": \"calculator\", \"arguments\": {\"expression\": \"" +
               std::to_string(*step) + " * 7\"}}\n</tool_call>";
      g.tokens = s.runtime().tokenizer().encode(g.text + "<|im_end|>");
      g.finish = Generation::Finish::Stop;
      s.append_tokens(g.tokens);
      return g;
    }
    return s.generate(opt);
  };
}

std::vector<Turn> converse(const std::string& device, CacheMode mode, std::vector<int64_t>* transcript_sizes) {
  RuntimeOptions o;
  o.model_dir = kRoot + "/examples/models/hypic-qa-tiny";
  o.device = device;
  o.mode = mode;
  auto rt = Runtime::open(o);
  test::TempDir dir;
  HistoryStore store = HistoryStore::open(dir.file("h.sqlite"));
  ToolRegistry tools;
  tools.add(calculator_tool());
  Agent agent(*rt, dsl::load_template(kRoot + "/tests/fixtures/sdk/multi_turn.yaml"), tools);
  agent.set_history(&store, "conversation");
  agent.set_generator(tool_then_answer());
  const std::vector<std::string> questions = {
      "Where does Soujol live?", "What is the badge of Kaimur?", "What is the gate of Draje?",
      "What is the badge of Gristen?", "Where does Soujol live?", "What is the key of Daplou?",
      "What is the badge of Thaiflyquoum?", "What is the gate of Draje?"};
  const Json docs = Json::array({"Soujol lives in Thunest. The badge of Gristen is 7918. The key of Daplou is 1568.",
                                 "The badge of Kaimur is 8313. The gate of Draje is 4355. The badge of Thaiflyquoum is 2934."});
  std::vector<Turn> turns;
  for (auto& q : questions) {
    const AgentResult r = agent.run(Json{{"docs", docs}, {"question", q}});
    EXPECT_EQ(r.steps, 2) << q;
    EXPECT_EQ(r.tool_calls.size(), 1u) << q;
    if (!r.tool_calls.empty()) {
      EXPECT_TRUE(r.tool_calls[0].ok) << r.tool_calls[0].result;
    }
    turns.push_back({r.answer, r.step_reports, r.prompt_tokens});
    if (transcript_sizes) transcript_sizes->push_back(static_cast<int64_t>(agent.session()->transcript().size()));
  }
  return turns;
}

class MultiTurnTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (GetParam() == "cuda" && !(cuda_built() && cuda_device_present())) GTEST_SKIP() << "no CUDA backend or device";
  }
};

TEST_P(MultiTurnTest, EveryTurnComputesOnlyItsNewTokensAndAnswersAsFullRecompute) {
  const std::vector<Turn> full = converse(GetParam(), CacheMode::Full, nullptr);
  for (CacheMode m : {CacheMode::Prefix, CacheMode::Hypic}) {
    const std::string what = GetParam() + " " + mode_name(m);
    std::vector<int64_t> ran;  // the session's transcript length after each turn
    const std::vector<Turn> turns = converse(GetParam(), m, &ran);
    ASSERT_EQ(turns.size(), full.size());
    for (size_t t = 0; t < turns.size(); ++t) {
      EXPECT_EQ(turns[t].answer, full[t].answer) << what << " turn " << t + 1;
      EXPECT_EQ(turns[t].prompt_tokens, full[t].prompt_tokens) << what << " turn " << t + 1;
      ASSERT_EQ(turns[t].steps.size(), 2u);
      const StepReport& prompt = turns[t].steps[0];
      if (t == 0) continue;
      // The new tokens: the previous reply's end-of-turn token, its frame, and the new question.
      const int64_t fresh = turns[t].prompt_tokens - ran[t - 1];
      EXPECT_GT(fresh, 0);
      EXPECT_LT(fresh, 40) << what << " turn " << t + 1 << ": the new message is short";
      EXPECT_EQ(prompt.reused_tokens, ran[t - 1]) << what << " turn " << t + 1;
      EXPECT_EQ(prompt.computed_tokens, fresh) << what << " turn " << t + 1;
      // The tool result inside the turn: a continuation of the live state as well.
      EXPECT_GT(turns[t].steps[1].computed_tokens, 0);
      EXPECT_LT(turns[t].steps[1].computed_tokens, 40);
    }
  }
}

// Qwen3/3.5 templates drop the reasoning of assistant turns before the last user query, so turn N+1's
// prompt diverges from what turn N generated inside the reply. The session's checkpoint at the end of
// turn N's prompt is then the exact prefix: only the re-rendered reply and the new message are computed.
// Qwen3.5's generation prompt opens a reasoning section that a re-rendered reply does not have: the
// checkpoint is taken before it, so those tokens are computed again.
void replies_without_reasoning_stay_reusable(const std::string& device, const std::string& chat_template) {
  RuntimeOptions o;
  o.model_dir = kRoot + "/examples/models/hypic-qa-tiny";
  o.device = device;
  o.chat_template_file = chat_template;
  auto rt = Runtime::open(o);
  test::TempDir dir;
  HistoryStore store = HistoryStore::open(dir.file("h.sqlite"));
  Agent agent(*rt, dsl::load_template(kRoot + "/tests/fixtures/sdk/multi_turn.yaml"), ToolRegistry());
  agent.set_history(&store, "c");
  const ChatFormat& f = rt->chat_format();
  const bool in_reasoning = f.generation_starts_in_reasoning(std::nullopt);
  const std::string reply = std::string(in_reasoning ? "" : "<think>\n") +
                            "The documents say where Soujol lives.\n</think>\n\nThunest";
  agent.set_generator(scripted_generator(std::vector<std::string>(4, reply)));
  // Generation-prompt tokens after the checkpoint.
  const std::string gen = f.generation_prompt(std::nullopt);
  const int64_t after = static_cast<int64_t>(
      rt->tokenizer().encode(gen.substr(f.history_rule().assistant_header.size())).size());
  EXPECT_EQ(after, in_reasoning ? 2 : 0);
  int64_t previous_prompt = 0;
  for (int t = 0; t < 4; ++t) {
    const AgentResult r = agent.run(Json{{"question", "Where does Soujol live? (" + std::to_string(t) + ")"}});
    EXPECT_EQ(r.answer, "Thunest");
    EXPECT_FALSE(r.reasoning.empty());
    if (t > 0) {
      EXPECT_EQ(r.step_reports[0].reused_tokens, previous_prompt - after) << "turn " << t + 1;
      EXPECT_EQ(r.step_reports[0].computed_tokens, r.prompt_tokens - previous_prompt + after) << "turn " << t + 1;
      EXPECT_LT(r.step_reports[0].computed_tokens, 40) << "turn " << t + 1;
    }
    previous_prompt = r.prompt_tokens;
  }
}

TEST_P(MultiTurnTest, RepliesRenderedWithoutTheirReasoningStayReusable) {
  replies_without_reasoning_stay_reusable(GetParam(), "");
}

TEST_P(MultiTurnTest, Qwen35RepliesRenderedWithoutTheirReasoningStayReusable) {
  replies_without_reasoning_stay_reusable(GetParam(), kRoot + "/tests/fixtures/chat/qwen3.5_chat_template.jinja");
}

INSTANTIATE_TEST_SUITE_P(Devices, MultiTurnTest, ::testing::Values("cpu", "cuda"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace hypic::sdk
