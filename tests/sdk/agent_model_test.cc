// The agent loop on a tiny fixture model with scripted model replies: tool calls run, every failure
// goes back to the model as a tool message, the step bound holds, blocks hit the cache on reuse, and
// sessions persist in SQLite.
#include "sdk/agent.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "dsl/template.h"
#include "runtime/error.h"
#include "tests/sdk/temp_dir.h"

namespace hypic::sdk {
namespace {

const std::string kRoot = HYPIC_SOURCE_DIR;

class AgentTest : public ::testing::Test {
 protected:
  void SetUp() override {
    RuntimeOptions o;
    o.model_dir = kRoot + "/tests/fixtures/models/qwen3_5_dense";
    rt_ = Runtime::open(o);
    tpl_ = dsl::load_template(kRoot + "/tests/fixtures/sdk/agent.yaml");
    Tool add;
    add.name = "add";
    add.parameters = Json::parse(R"({"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"integer"}},"required":["a","b"]})");
    add.fn = [](const Json& a) -> Json { return std::to_string(a["a"].get<long long>() + a["b"].get<long long>()); };
    tools_.add(add);
    Tool explode;
    explode.name = "explode";
    explode.fn = [](const Json&) -> Json { throw std::runtime_error("boom"); };
    tools_.add(explode);
  }
  Json vars(const std::string& q) const {
    return Json{{"docs", Json::array({"Kelmora lives in Drast.", "The code of Pelu is 5831."})}, {"question", q}};
  }
  std::unique_ptr<Runtime> rt_;
  dsl::Template tpl_;
  ToolRegistry tools_;
};

const char* kAddCall = "<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 2, \"b\": 3}}\n</tool_call>";

TEST_F(AgentTest, ToolCallThenAnswer) {
  Agent agent(*rt_, tpl_, tools_);
  agent.set_generator(scripted_generator({kAddCall, "The sum is 5."}));
  AgentResult r = agent.run(vars("What is 2 + 3?"));
  EXPECT_EQ(r.finish_reason, "answered");
  EXPECT_EQ(r.steps, 2);
  EXPECT_EQ(r.answer, "The sum is 5.");
  ASSERT_EQ(r.tool_calls.size(), 1u);
  EXPECT_TRUE(r.tool_calls[0].ok);
  EXPECT_EQ(r.tool_calls[0].result, "5");
  // user, assistant(tool_calls), tool, assistant
  ASSERT_EQ(r.messages.size(), 4u);
  EXPECT_EQ(r.messages[2].role, "tool");
  EXPECT_EQ(r.messages[2].content, "5");
}

TEST_F(AgentTest, EveryFailureGoesBackToTheModel) {
  Agent agent(*rt_, tpl_, tools_);
  agent.set_generator(scripted_generator({
      "<tool_call>\n{\"name\": \"weather\", \"arguments\": {}}\n</tool_call>",             // unknown tool
      "<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": \"two\"}}\n</tool_call>",   // bad arguments
      "<tool_call>\n{\"name\": \"explode\", \"arguments\": {}}\n</tool_call>",             // tool throws
      "Sorry, I could not compute it.",
  }));
  AgentResult r = agent.run(vars("What is 2 + 3?"));
  EXPECT_EQ(r.finish_reason, "answered");
  EXPECT_EQ(r.steps, 4);
  ASSERT_EQ(r.tool_calls.size(), 3u);
  EXPECT_NE(r.tool_calls[0].result.find("unknown tool 'weather'"), std::string::npos);
  EXPECT_NE(r.tool_calls[1].result.find("bad arguments"), std::string::npos);
  EXPECT_NE(r.tool_calls[2].result.find("boom"), std::string::npos);
  for (auto& c : r.tool_calls) EXPECT_FALSE(c.ok);
}

TEST_F(AgentTest, MalformedToolCallJsonIsReported) {
  Agent agent(*rt_, tpl_, tools_);
  agent.set_generator(scripted_generator({"<tool_call>\n{\"name\": \"add\", \"arguments\": {\n</tool_call>", "ok"}));
  AgentResult r = agent.run(vars("q"));
  EXPECT_EQ(r.steps, 2);
  ASSERT_EQ(r.tool_calls.size(), 1u);
  EXPECT_FALSE(r.tool_calls[0].ok);
  EXPECT_NE(r.tool_calls[0].result.find("could not use your tool call"), std::string::npos);
}

TEST_F(AgentTest, StepBoundHolds) {
  Agent agent(*rt_, tpl_, tools_);
  agent.set_generator(scripted_generator(std::vector<std::string>(10, kAddCall)));
  AgentResult r = agent.run(vars("loop forever"));
  EXPECT_EQ(r.finish_reason, "max_steps");
  EXPECT_EQ(r.steps, 4);  // agent.max_steps in the template
  EXPECT_EQ(r.tool_calls.size(), 4u);
}

TEST_F(AgentTest, SecondRunHitsTheCachedBlocks) {
  Agent agent(*rt_, tpl_, tools_);
  agent.set_generator(scripted_generator({"first", "second"}));
  AgentResult a = agent.run(vars("Where does Kelmora live?"));
  AgentResult b = agent.run(vars("What is the code of Pelu?"));
  ASSERT_EQ(a.blocks.size(), b.blocks.size());
  for (size_t i = 0; i + 1 < b.blocks.size(); ++i) {
    EXPECT_FALSE(a.blocks[i].hit) << a.blocks[i].id;
    EXPECT_TRUE(b.blocks[i].hit) << b.blocks[i].id;
  }
  EXPECT_FALSE(b.blocks.back().hit);  // the question is never cached
  EXPECT_LT(b.computed_tokens, a.computed_tokens);
}

TEST_F(AgentTest, SampledGenerationStreamsAndCancels) {
  Agent agent(*rt_, tpl_, tools_);
  std::string streamed;
  std::atomic<bool> cancel{false};
  AgentRunOptions opt;
  opt.cancel = &cancel;
  opt.on_text = [&](std::string_view t) {
    streamed += t;
    cancel = true;  // stop after the first piece of text
  };
  AgentResult r = agent.run(vars("Say something."), opt);
  EXPECT_EQ(r.finish_reason, "cancelled");
  EXPECT_EQ(r.answer.empty(), streamed.empty());
}

TEST_F(AgentTest, HistoryPersistsAndFeedsTheNextRun) {
  test::TempDir dir;
  const std::string db = dir.file("history.sqlite");
  {
    HistoryStore store = HistoryStore::open(db);
    Agent agent(*rt_, tpl_, tools_);
    agent.set_history(&store, "s1");
    agent.set_generator(scripted_generator({kAddCall, "It is 5."}));
    agent.run(vars("What is 2 + 3?"));
  }
  HistoryStore store = HistoryStore::open(db);  // as after a restart
  const auto msgs = store.messages("s1");
  ASSERT_EQ(msgs.size(), 4u);
  EXPECT_EQ(msgs[0].content, "What is 2 + 3?");
  EXPECT_EQ(msgs[3].content, "It is 5.");
  Agent agent(*rt_, tpl_, tools_);
  agent.set_history(&store, "s1");
  agent.set_generator(scripted_generator({"Yes."}));
  AgentResult r = agent.run(vars("Are you sure?"));
  size_t history_blocks = 0;
  for (auto& b : r.blocks) history_blocks += b.id.rfind("history.", 0) == 0;
  EXPECT_EQ(history_blocks, 4u);
  const auto all = store.messages("s1");
  ASSERT_EQ(all.size(), 6u);
  // Which blocks the messages became: the first turn's messages as history blocks of the second run,
  // the second question as its own block; keys are the 32-hex-digit segment keys.
  for (size_t i = 0; i < 4; ++i) {
    ASSERT_EQ(all[i].blocks.size(), 1u) << i;
    EXPECT_EQ(all[i].blocks[0].block_id, "history." + std::to_string(i));
    EXPECT_EQ(all[i].blocks[0].content_key.size(), 32u);
  }
  ASSERT_EQ(all[4].blocks.size(), 1u);
  EXPECT_EQ(all[4].blocks[0].block_id, "question");
}

}  // namespace
}  // namespace hypic::sdk

namespace hypic::sdk {
namespace {

TEST(SessionTest, StopStringEndsGenerationAndIsNotStreamed) {
  RuntimeOptions o;
  o.model_dir = std::string(HYPIC_SOURCE_DIR) + "/tests/fixtures/models/qwen3_5_dense";
  auto rt = Runtime::open(o);
  Session probe(*rt);
  probe.prefill({{rt->tokenizer().encode("<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n"), BlockCache::None}});
  GenerateOptions free_run;
  free_run.max_tokens = 12;
  const Generation g = probe.generate(free_run);
  ASSERT_GE(g.text.size(), 4u);
  // Stop at a string the model is known to produce (greedy is deterministic), plus an empty one.
  const std::string stop = g.text.substr(2, 2);
  Session s(*rt);
  s.prefill({{rt->tokenizer().encode("<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n"), BlockCache::None}});
  GenerateOptions opt;
  opt.max_tokens = 12;
  opt.stop = {"", stop};
  std::string streamed;
  opt.on_text = [&](std::string_view t) { streamed += t; };
  const Generation h = s.generate(opt);
  EXPECT_EQ(h.finish, Generation::Finish::Stop);
  EXPECT_EQ(h.text.find(stop), std::string::npos);
  EXPECT_EQ(streamed, h.text);
  EXPECT_EQ(g.text.rfind(h.text, 0), 0u);  // the same greedy text, cut before the stop string
}

}  // namespace
}  // namespace hypic::sdk

namespace hypic::sdk {
namespace {

// The same agent on a runtime told to use the Qwen3.5 chat template: the prompt is framed in that
// format, replies start inside reasoning, and XML tool calls run with arguments typed by the schema.
class Qwen35AgentTest : public AgentTest {
 protected:
  void SetUp() override {
    AgentTest::SetUp();
    RuntimeOptions o;
    o.model_dir = kRoot + "/tests/fixtures/models/qwen3_5_dense";
    o.chat_template_file = kRoot + "/tests/fixtures/chat/qwen3.5_chat_template.jinja";
    rt_ = Runtime::open(o);
  }
};

TEST_F(Qwen35AgentTest, XmlToolCallsRunWithTypedArguments) {
  EXPECT_EQ(rt_->chat_format().name(), "qwen3.5");
  Agent agent(*rt_, tpl_, tools_);
  agent.set_generator(scripted_generator({
      "The user wants a sum.\n</think>\n\nAdding.\n\n<tool_call>\n<function=add>\n<parameter=a>\n2\n</parameter>\n"
      "<parameter=b>\n3\n</parameter>\n</function>\n</tool_call>",
      "Done.\n</think>\n\nThe sum is 5."}));
  std::vector<ReplyEvent::Kind> kinds;
  AgentRunOptions opt;
  opt.on_event = [&](const ReplyEvent& e) { kinds.push_back(e.kind); };
  const AgentResult r = agent.run(vars("What is 2 + 3?"), opt);
  EXPECT_EQ(r.finish_reason, "answered");
  ASSERT_EQ(r.tool_calls.size(), 1u);
  EXPECT_TRUE(r.tool_calls[0].ok) << r.tool_calls[0].result;  // integers, not strings: the tool adds them
  EXPECT_EQ(r.tool_calls[0].result, "5");
  EXPECT_EQ(r.answer, "The sum is 5.");
  EXPECT_EQ(r.reasoning, "Done.");
  using K = ReplyEvent::Kind;
  EXPECT_EQ(kinds, (std::vector<K>{K::kReasoning, K::kText, K::kToolCall, K::kReasoning, K::kText}));
  // The tool result went back in the format's own framing.
  const std::string transcript = rt_->tokenizer().decode(agent.session()->transcript());
  EXPECT_NE(transcript.find("<|im_start|>user\n<tool_response>\n5\n</tool_response><|im_end|>\n"
                            "<|im_start|>assistant\n<think>\n"),
            std::string::npos);
  EXPECT_NE(transcript.find("<function=example_function_name>"), std::string::npos);  // the XML tool docs
}

TEST_F(Qwen35AgentTest, MalformedAndUnknownCallsGoBackToTheModel) {
  Agent agent(*rt_, tpl_, tools_);
  agent.set_generator(scripted_generator({
      "r\n</think>\n\n<tool_call>\n<function=launch>\n</function>\n</tool_call>",
      "r\n</think>\n\n<tool_call>\n<parameter=a>\n1\n</parameter>\n</tool_call>",
      "r\n</think>\n\n<tool_call>\n<function=add>\n<parameter=a>\n1",  // cut off
      "r\n</think>\n\nI cannot."}));
  const AgentResult r = agent.run(vars("What is 2 + 3?"));
  EXPECT_EQ(r.steps, 4);
  ASSERT_EQ(r.tool_calls.size(), 3u);
  EXPECT_NE(r.tool_calls[0].result.find("unknown tool 'launch'"), std::string::npos) << r.tool_calls[0].result;
  EXPECT_NE(r.tool_calls[1].result.find("<function=NAME>"), std::string::npos) << r.tool_calls[1].result;
  EXPECT_NE(r.tool_calls[2].result.find("not closed"), std::string::npos) << r.tool_calls[2].result;
}

}  // namespace
}  // namespace hypic::sdk

// The template's agent settings (tool_choice, max_tokens, sampling) as a caller sees them through
// Agent::run: each test parses tests/fixtures/sdk/agent.yaml with another `agent:` section.
namespace hypic::sdk {
namespace {

class AgentSettingsTest : public AgentTest {
 protected:
  dsl::Template with_agent(const std::string& settings) const {
    std::ifstream in(kRoot + "/tests/fixtures/sdk/agent.yaml");
    std::stringstream ss;
    ss << in.rdbuf();
    std::string text = ss.str();
    const std::string was = "agent:\n  max_steps: 4\n  max_tokens: 8\n";
    const size_t at = text.find(was);
    EXPECT_NE(at, std::string::npos) << "agent.yaml changed";
    return dsl::parse_template(text.replace(at, was.size(), "agent:\n  max_steps: 4\n" + settings), "agent.yaml");
  }
  AgentResult run(const std::string& settings, std::vector<std::string> script = {}) {
    Agent agent(*rt_, with_agent(settings), tools_);
    if (!script.empty()) agent.set_generator(scripted_generator(std::move(script)));
    return agent.run(vars("What is 2 + 3?"));
  }
  static bool has_tool_message(const AgentResult& r, const std::string& text) {
    for (auto& m : r.messages)
      if (m.role == "tool" && m.content.find(text) != std::string::npos) return true;
    return false;
  }
};

const char* kExplodeCall = "<tool_call>\n{\"name\": \"explode\", \"arguments\": {}}\n</tool_call>";

TEST_F(AgentSettingsTest, ToolChoiceNoneNeverRunsATool) {
  const AgentResult r = run("  max_tokens: 8\n  tool_choice: none\n", {kAddCall, "unused"});
  EXPECT_EQ(r.finish_reason, "answered");
  EXPECT_EQ(r.steps, 1);
  EXPECT_TRUE(r.tool_calls.empty());
  for (auto& m : r.messages) EXPECT_NE(m.role, "tool");
  // The same reply under auto runs the tool: the setting is what stopped it.
  EXPECT_EQ(run("  max_tokens: 8\n", {kAddCall, "It is 5."}).tool_calls.size(), 1u);
}

TEST_F(AgentSettingsTest, ToolChoiceRequiredMakesEveryStepCallATool) {
  const AgentResult r = run("  max_tokens: 8\n  tool_choice: required\n", {"No tool.", kAddCall, "Five.", "Still five."});
  EXPECT_EQ(r.finish_reason, "max_steps") << "an answer without a tool call does not end the run";
  EXPECT_EQ(r.steps, 4);
  EXPECT_TRUE(has_tool_message(r, "this step requires a tool call"));
  ASSERT_EQ(r.tool_calls.size(), 1u);
  EXPECT_TRUE(r.tool_calls[0].ok);
  EXPECT_EQ(r.tool_calls[0].result, "5");
  // Under auto the first reply is the answer.
  EXPECT_EQ(run("  max_tokens: 8\n", {"No tool."}).finish_reason, "answered");
}

TEST_F(AgentSettingsTest, ToolChoiceNamedRefusesEveryOtherTool) {
  const AgentResult r = run("  max_tokens: 8\n  tool_choice: add\n", {kExplodeCall, kAddCall, "It is 5."});
  EXPECT_EQ(r.finish_reason, "answered");
  EXPECT_EQ(r.steps, 3);
  ASSERT_EQ(r.tool_calls.size(), 2u);
  EXPECT_FALSE(r.tool_calls[0].ok);
  EXPECT_EQ(r.tool_calls[0].name, "explode");
  EXPECT_NE(r.tool_calls[0].result.find("only the tool 'add'"), std::string::npos) << r.tool_calls[0].result;
  EXPECT_EQ(r.tool_calls[0].result.find("boom"), std::string::npos) << "the refused tool must not run";
  EXPECT_TRUE(r.tool_calls[1].ok);
  EXPECT_EQ(r.tool_calls[1].result, "5");
  // A name the template does not declare is refused when the template is read.
  EXPECT_THROW(with_agent("  tool_choice: weather\n"), Error);
}

TEST_F(AgentSettingsTest, MaxTokensEndsTheRunWithLength) {
  const AgentResult longer = run("  max_tokens: 12\n");
  const AgentResult r = run("  max_tokens: 3\n");
  EXPECT_EQ(r.finish_reason, "length");
  EXPECT_EQ(r.steps, 1);
  ASSERT_FALSE(r.messages.empty());
  EXPECT_EQ(r.messages.back().role, "assistant");
  // Greedy: the cut reply is the start of the longer one.
  ASSERT_FALSE(r.answer.empty());
  EXPECT_EQ(longer.answer.rfind(r.answer, 0), 0u) << "'" << r.answer << "' vs '" << longer.answer << "'";
  EXPECT_LT(r.answer.size(), longer.answer.size());
}

TEST_F(AgentSettingsTest, SamplingSettingsOfTheTemplateReachTheSampler) {
  const std::string greedy = run("  max_tokens: 8\n").answer;
  const std::string hot = "  max_tokens: 8\n  temperature: 1.5\n";
  // Reproducible from the seed.
  EXPECT_EQ(run(hot + "  seed: 7\n").answer, run(hot + "  seed: 7\n").answer);
  // Temperature and seed change the text; top_k 1 or a tiny top_p keep only the arg-max: greedy again.
  std::set<std::string> answers;
  for (int seed = 1; seed <= 4; ++seed) answers.insert(run(hot + "  seed: " + std::to_string(seed) + "\n").answer);
  EXPECT_GT(answers.size(), 1u) << "different seeds must draw different replies";
  EXPECT_FALSE(answers.count(greedy) && answers.size() == 1);
  EXPECT_EQ(run(hot + "  seed: 3\n  top_k: 1\n").answer, greedy);
  EXPECT_EQ(run(hot + "  seed: 3\n  top_p: 0.000001\n").answer, greedy);
  // Penalties reach it too: a strong repetition penalty moves the greedy reply; one of 1 leaves it.
  EXPECT_NE(run("  max_tokens: 8\n  repetition_penalty: 1.9\n").answer, greedy);
  EXPECT_EQ(run("  max_tokens: 8\n  repetition_penalty: 1\n  presence_penalty: 0\n").answer, greedy);
}

}  // namespace
}  // namespace hypic::sdk
