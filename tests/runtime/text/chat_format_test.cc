// The native Qwen3 chat format against goldens from transformers' apply_chat_template
// (tools/fixtures/make_tokenizer_goldens.py), plus the message spans that map prompt blocks to segments.
#include "runtime/text/chat_format.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "runtime/error.h"
#include "tests/runtime/text/fixture_files.h"
#include "runtime/text/python_json.h"

namespace hypic {
namespace {

const std::string& kDir = test::kFixtures;
using test::slurp;

const ChatFormat& qwen() {
  static const std::unique_ptr<ChatFormat> f = load_chat_format(test::kQwen3Tokenizer);
  return *f;
}

// Spans are ordered, disjoint, inside the text, and with preamble and generation prompt tile it.
void check_spans(const RenderedChat& r, const Conversation& c, const std::string& name) {
  ASSERT_EQ(r.messages.size(), c.messages.size()) << name;
  size_t pos = r.preamble.end;
  EXPECT_EQ(r.preamble.begin, 0u) << name;
  for (size_t i = 0; i < r.messages.size(); ++i) {
    const TextSpan& s = r.messages[i];
    EXPECT_EQ(s.begin, pos) << name << " message " << i;
    EXPECT_LE(s.begin, s.end) << name;
    const std::string piece = r.text.substr(s.begin, s.size());
    const std::string& role = c.messages[i].role;
    const bool tool_continuation = role == "tool" && i > 0 && c.messages[i - 1].role == "tool";
    if (tool_continuation)
      EXPECT_EQ(piece.rfind("\n<tool_response>\n", 0), 0u) << name << " message " << i;
    else
      EXPECT_EQ(piece.rfind("<|im_start|>", 0), 0u) << name << " message " << i << ": " << piece;
    // The message's own text lies in its span (an assistant's <think> part is rewritten by the template).
    std::string own = c.messages[i].content;
    if (role == "assistant" && own.find("</think>") != std::string::npos) {
      own = own.substr(own.rfind("</think>") + 8);
      own.erase(0, own.find_first_not_of('\n') == std::string::npos ? own.size() : own.find_first_not_of('\n'));
    }
    EXPECT_NE(piece.find(own), std::string::npos) << name << " message " << i;
    pos = s.end;
  }
  EXPECT_EQ(r.generation_prompt.begin, pos) << name;
  EXPECT_EQ(r.generation_prompt.end, r.text.size()) << name;
}

TEST(ChatFormat, MatchesTransformersApplyChatTemplate) {
  HYPIC_NEED_QWEN3_TOKENIZER();
  const auto goldens = nlohmann::ordered_json::parse(slurp(kDir + "tokenizer/chat_goldens.json"));
  ASSERT_GE(goldens.size(), 20u);
  EXPECT_EQ(qwen().name(), "qwen3");
  for (const auto& g : goldens) {
    const std::string name = g["name"];
    nlohmann::ordered_json conv_json = {{"messages", g["messages"]}};
    if (g.contains("tools")) conv_json["tools"] = g["tools"];
    const Conversation conv = parse_openai_conversation(conv_json, name);
    RenderOptions opts;
    opts.add_generation_prompt = g["add_generation_prompt"];
    if (g.contains("enable_thinking")) opts.enable_thinking = g["enable_thinking"].get<bool>();
    const RenderedChat r = qwen().render(conv, opts);
    EXPECT_EQ(r.text, g["expected"].get<std::string>()) << name;
    check_spans(r, conv, name);
  }
}

TEST(ChatFormat, SpansOfToolsHeaderAndGroupedToolResponses) {
  HYPIC_NEED_QWEN3_TOKENIZER();
  nlohmann::ordered_json j = nlohmann::ordered_json::parse(R"({
    "tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}],
    "messages": [{"role": "user", "content": "q"},
                 {"role": "assistant", "content": null, "tool_calls": [{"function": {"name": "f", "arguments": {}}},
                                                                      {"function": {"name": "f", "arguments": "{}"}}]},
                 {"role": "tool", "content": "r1"}, {"role": "tool", "content": "r2"}]})");
  const Conversation c = parse_openai_conversation(j, "inline");
  const RenderedChat r = qwen().render(c, {});
  // No system message: the tools header belongs to no message.
  EXPECT_EQ(r.text.substr(r.preamble.begin, r.preamble.size()).rfind("<|im_start|>system\n# Tools", 0), 0u);
  EXPECT_EQ(r.text.substr(r.messages[2].begin, r.messages[2].size()),
            "<|im_start|>user\n<tool_response>\nr1\n</tool_response>");
  EXPECT_EQ(r.text.substr(r.messages[3].begin, r.messages[3].size()), "\n<tool_response>\nr2\n</tool_response><|im_end|>\n");
  EXPECT_EQ(r.text.substr(r.generation_prompt.begin), "<|im_start|>assistant\n");
  EXPECT_NE(r.text.find("<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>\n<tool_call>"), std::string::npos);
}

TEST(ChatFormat, RejectsWhatItCannotRender) {
  HYPIC_NEED_QWEN3_TOKENIZER();
  auto parse = [](const char* s) { return parse_openai_conversation(nlohmann::ordered_json::parse(s), "conv.json"); };
  EXPECT_THROW(qwen().render(parse(R"({"messages": [{"role": "developer", "content": "x"}]})"), {}), InvalidArgument);
  EXPECT_THROW(parse(R"({"messages": [{"role": "user", "content": [{"type": "text", "text": "x"}]}]})"), InvalidArgument);
  EXPECT_THROW(parse(R"({"messages": [{"role": "assistant", "tool_calls": [{"function": {"arguments": {}}}]}]})"),
               InvalidArgument);
  EXPECT_THROW(parse(R"({"messages": {}})"), FormatError);
  try {
    parse(R"({"messages": [{"role": "user", "content": 5}]})");
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("conv.json: messages[0].content"), std::string::npos) << e.what();
  }
  EXPECT_THROW(make_chat_format("{{ messages }}", "x.jinja"), ModelError);
  EXPECT_THROW(load_chat_format("/nonexistent-dir"), IoError);
}

TEST(PythonJson, WritesWhatJsonDumpsWrites) {
  // Expected strings are Python 3's json.dumps(x, ensure_ascii=False).
  const auto v = nlohmann::ordered_json::parse(
      R"({"z": 1, "a": [1.0, 0.1, 1e16, 1e15, 1.5e-5, 0.0001, -0.0, 123456789012345680.0, 5e-324],
          "s": "é\n\"\\/\u0001\u007f", "t": true, "n": null, "e": {}, "l": []})");
  EXPECT_EQ(python_json_dumps(v),
            "{\"z\": 1, \"a\": [1.0, 0.1, 1e+16, 1000000000000000.0, 1.5e-05, 0.0001, -0.0, 1.2345678901234568e+17, "
            "5e-324], \"s\": \"é\\n\\\"\\\\/\\u0001\x7f\", \"t\": true, \"n\": null, \"e\": {}, \"l\": []}");
}

}  // namespace
}  // namespace hypic
