// The built-in Qwen3 framing against the real chat template (rendered by jinja2 into
// tests/fixtures/dsl/chat_reference.json), and a compiled plan against the same bytes.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "dsl/compiler.h"
#include "dsl/qwen_framer.h"

using namespace hypic::dsl;

namespace {

Json reference() {
  std::ifstream in(std::string(HYPIC_SOURCE_DIR) + "/tests/fixtures/dsl/chat_reference.json");
  std::stringstream ss;
  ss << in.rdbuf();
  return Json::parse(ss.str());
}

std::vector<FrameMessage> messages_of(const Json& c) {
  std::vector<FrameMessage> out;
  for (const auto& m : c["messages"]) {
    FrameMessage f{m["role"], m["content"], nullptr, std::nullopt};
    if (m.contains("tool_calls")) f.tool_calls = m["tool_calls"];
    if (m.contains("reasoning_content")) f.reasoning_content = m["reasoning_content"].get<std::string>();
    out.push_back(std::move(f));
  }
  return out;
}

TEST(QwenFramer, MatchesTheRealChatTemplateByteForByte) {
  const Json ref = reference();
  ASSERT_GE(ref.size(), 8u);
  QwenChatFramer framer;
  for (const auto& c : ref) {
    const Json tools = c.contains("tools") && !c["tools"].is_null() ? c["tools"] : Json::array();
    const FramedConversation f = framer.frame(messages_of(c), tools);
    EXPECT_EQ(f.text, c["rendered"].get<std::string>()) << c["name"];
    std::optional<bool> thinking;
    if (c.contains("enable_thinking")) thinking = c["enable_thinking"].get<bool>();
    EXPECT_EQ(f.text + framer.generation_prompt(thinking), c["rendered_with_generation_prompt"].get<std::string>())
        << c["name"];
  }
}

TEST(QwenFramer, SpansTileTheTextAndContentIsVerbatim) {
  QwenChatFramer framer;
  for (const auto& c : reference()) {
    const auto msgs = messages_of(c);
    const Json tools = c.contains("tools") && !c["tools"].is_null() ? c["tools"] : Json::array();
    const FramedConversation f = framer.frame(msgs, tools);
    std::vector<ByteSpan> spans = f.messages;
    if (f.tools) spans.push_back(*f.tools);
    std::sort(spans.begin(), spans.end(), [](auto& a, auto& b) { return a.begin < b.begin; });
    size_t at = 0;
    for (const auto& s : spans) {
      EXPECT_EQ(s.begin, at) << c["name"];
      at = s.end;
    }
    EXPECT_EQ(at, f.text.size()) << c["name"];
    for (size_t i = 0; i < msgs.size(); ++i)
      if (f.content_at[i] != std::string::npos) {
        EXPECT_EQ(f.text.substr(f.content_at[i], msgs[i].content.size()), msgs[i].content) << c["name"] << " " << i;
      }
  }
}

// A template whose conversation is the reference case "system_tools_user" renders those exact bytes.
TEST(Plan, ConcatenatedBlocksEqualTheChatTemplate) {
  const Json ref = reference();
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
  EXPECT_EQ(plan.text(), (*c)["rendered"].get<std::string>());
  EXPECT_EQ(plan.text() + plan.generation_prompt, (*c)["rendered_with_generation_prompt"].get<std::string>());
  ASSERT_EQ(plan.blocks.size(), 3u);
  EXPECT_EQ(plan.blocks[1].text.rfind("# Tools", 0), 0u);
}

}  // namespace

// The DSL's framer and the runtime's chat format are two transcriptions of one template: they must agree.
#include "runtime/text/qwen_chat_format.h"

namespace {

TEST(QwenFramer, AgreesWithTheRuntimeChatFormat) {
  hypic::QwenChatFormat runtime_format;
  QwenChatFramer framer;
  for (const auto& c : reference()) {
    Json conv{{"messages", c["messages"]}};
    if (c.contains("tools") && !c["tools"].is_null()) conv["tools"] = c["tools"];
    const hypic::Conversation parsed = hypic::parse_openai_conversation(conv, c["name"].get<std::string>());
    hypic::RenderOptions opts;
    opts.add_generation_prompt = false;
    const hypic::RenderedChat r = runtime_format.render(parsed, opts);
    const Json tools = conv.contains("tools") ? conv["tools"] : Json::array();
    const FramedConversation f = framer.frame(messages_of(c), tools);
    EXPECT_EQ(f.text, r.text) << c["name"];
    ASSERT_EQ(f.messages.size(), r.messages.size());
    // Spans agree except that the runtime gives a first system message the tool docs as well.
    for (size_t i = 0; i < r.messages.size(); ++i) {
      EXPECT_EQ(f.messages[i].begin, r.messages[i].begin) << c["name"] << " " << i;
      if (!(i == 0 && f.tools)) {
        EXPECT_EQ(f.messages[i].end, r.messages[i].end) << c["name"] << " " << i;
      }
    }
  }
}

}  // namespace
