// Prompt plans are framed by the model's chat format: compiled plans against the bytes of the real
// chat templates (tests/fixtures/dsl/chat_reference.json for Qwen3, tests/fixtures/chat/goldens.json
// from transformers for both formats), blocks cut on message boundaries in either format's order.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "dsl/compiler.h"
#include "runtime/text/chat_format.h"

using namespace hypic::dsl;

namespace {

Json read_json(const std::string& rel) {
  std::ifstream in(std::string(HYPIC_SOURCE_DIR) + "/tests/fixtures/" + rel);
  std::stringstream ss;
  ss << in.rdbuf();
  return Json::parse(ss.str());
}

const hypic::ChatFormat& qwen35() {
  static const auto f = hypic::load_chat_format(
      "/nonexistent", std::string(HYPIC_SOURCE_DIR) + "/tests/fixtures/chat/qwen3.5_chat_template.jinja");
  return *f;
}

const Json& golden(const std::string& format, const std::string& name) {
  static const Json all = read_json("chat/goldens.json");
  for (const auto& g : all)
    if (g["format"] == format && g["name"] == name) return g;
  throw std::runtime_error("no golden " + format + "/" + name);
}

// A template whose conversation is the reference case "system_tools_user" renders those exact bytes.
TEST(Plan, ConcatenatedBlocksEqualTheChatTemplate) {
  const Json ref = read_json("dsl/chat_reference.json");
  const Json* c = nullptr;
  for (const auto& r : ref)
    if (r["name"] == "system_tools_user") c = &r;
  ASSERT_NE(c, nullptr);
  const Template t = parse_template(R"(
vars:
  question: string
tools:
  - name: search_docs
    description: Search the documents.
    parameters: {type: object, properties: {query: {type: string}}, required: [query]}
  - name: calculator
    description: 'Evaluate arithmetic, e.g. "2*3".'
    parameters: {type: object, properties: {expression: {type: string}}}
blocks:
  - {id: system, role: system, text: Use tools.}
  - {id: tools, tools: all}
  - {id: q, role: user, text: "{{question}}"}
)",
                                    "ref.yaml");
  const PromptPlan plan = compile(t, Json{{"question", "What is 2*3?"}});
  EXPECT_EQ(plan.chat_format, "qwen3");
  EXPECT_EQ(plan.text(), (*c)["rendered"].get<std::string>());
  EXPECT_EQ(plan.text() + plan.generation_prompt, (*c)["rendered_with_generation_prompt"].get<std::string>());
  ASSERT_EQ(plan.blocks.size(), 3u);
  EXPECT_EQ(plan.blocks[1].text.rfind("# Tools", 0), 0u);
}

// The transformers golden "system_tools" (system, two tools, a user question) as a template, in both
// formats: Qwen3.5 writes the tool docs before the system text, so the plan lists the tools block first.
const char* kSystemTools = R"(
vars:
  question: string
tools:
  - name: get_weather
    description: 'Get the weather in a city. Use "metric" units; é 東京'
    parameters:
      type: object
      properties:
        city: {type: string, description: City name}
        units: {type: string, enum: [metric, imperial]}
        days: {type: integer, minimum: 1, maximum: 7.5}
      required: [city]
  - name: write_file
    description: Write a file.
    parameters:
      type: object
      properties:
        path: {type: string}
        content: {type: string}
        overwrite: {type: boolean}
        mode: {type: [integer, "null"]}
        meta: {type: object}
        tags: {type: array}
      required: [path, content]
blocks:
  - {id: system, role: system, cache: pin, text: You are a helpful assistant.}
  - {id: tools, tools: all}
  - {id: q, role: user, text: "{{question}}"}
)";

TEST(Plan, BothFormatsFrameTheTransformersGolden) {
  const Template t = parse_template(kSystemTools, "st.yaml");
  for (const char* fmt : {"qwen3", "qwen3.5"}) {
    CompileOptions o;
    o.format = std::string(fmt) == "qwen3" ? &hypic::default_chat_format() : &qwen35();
    const PromptPlan plan = compile(t, Json{{"question", "Weather in Paris?"}}, o);
    EXPECT_EQ(plan.chat_format, fmt);
    EXPECT_EQ(plan.text() + plan.generation_prompt, golden(fmt, "system_tools")["expected"].get<std::string>()) << fmt;
    ASSERT_EQ(plan.blocks.size(), 3u);
    const std::string first = std::string(fmt) == "qwen3" ? "system" : "tools";
    EXPECT_EQ(plan.blocks[0].id, first) << fmt;
  }
}

TEST(Plan, Qwen35TrimsJoinedTextAndCutsItOnBlockBoundaries) {
  const Template t = parse_template(R"(
vars:
  a: string
  b: string
blocks:
  - {id: s, role: system, text: "  sys  "}
  - {id: p1, role: user, text: "{{a}}"}
  - {id: p2, role: user, join: true, text: "{{b}}"}
)",
                                    "j.yaml");
  CompileOptions o;
  o.format = &qwen35();
  const PromptPlan plan = compile(t, Json{{"a", "\n first part "}, {"b", "second part \n"}}, o);
  ASSERT_EQ(plan.blocks.size(), 3u);
  EXPECT_EQ(plan.text(), "<|im_start|>system\nsys<|im_end|>\n<|im_start|>user\nfirst part second part<|im_end|>\n");
  EXPECT_EQ(plan.blocks[1].text, "<|im_start|>user\nfirst part ");
  EXPECT_EQ(plan.blocks[2].text, "second part<|im_end|>\n");
  EXPECT_EQ(plan.generation_prompt, "<|im_start|>assistant\n<think>\n");
}

TEST(Plan, Qwen35RendersHistoryToolCallsAsXml) {
  const Template t = parse_template(R"(
vars:
  h: {type: list}
  q: string
tools:
  - name: add
    parameters: {type: object, properties: {a: {type: integer}, b: {type: integer}}}
blocks:
  - {id: tools, tools: all}
  - {id: hist, history: h}
  - {id: q, role: user, text: "{{q}}"}
)",
                                    "h.yaml");
  CompileOptions o;
  o.format = &qwen35();
  const Json h = Json::parse(R"([{"role": "user", "content": "1+2?"},
      {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "add", "arguments": {"a": 1, "b": 2}}}]},
      {"role": "tool", "content": "3"}, {"role": "assistant", "content": "3"}])");
  const PromptPlan plan = compile(t, Json{{"h", h}, {"q", "and 2+2?"}}, o);
  EXPECT_NE(plan.text().find("<|im_start|>assistant\n<tool_call>\n<function=add>\n<parameter=a>\n1\n</parameter>\n"
                             "<parameter=b>\n2\n</parameter>\n</function>\n</tool_call><|im_end|>\n"),
            std::string::npos)
      << plan.text();
  // History is before the new question: no reasoning section is rendered for it.
  EXPECT_EQ(plan.text().find("<think>"), std::string::npos);
}

}  // namespace
