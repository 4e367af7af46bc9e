// The native chat formats (Qwen3, Qwen3.5) against goldens from transformers' apply_chat_template on
// the real templates (tools/fixtures/make_chat_format_goldens.py), the
// spans that map prompt blocks to segments, detection, and what each format reports.
#include "runtime/text/chat_format.h"

#include <gtest/gtest.h>

#include "runtime/error.h"
#include "runtime/text/python_json.h"
#include "runtime/text/python_string.h"
#include "tests/runtime/text/fixture_files.h"

namespace hypic {
namespace {

using Json = nlohmann::ordered_json;
const std::string& kDir = test::kFixtures;
using test::slurp;

const ChatFormat& format(const std::string& name) {
  static const std::unique_ptr<ChatFormat> q3 =
      load_chat_format("/nonexistent", kDir + "chat/qwen3_chat_template.jinja");
  static const std::unique_ptr<ChatFormat> q35 =
      load_chat_format("/nonexistent", kDir + "chat/qwen3.5_chat_template.jinja");
  return name == "qwen3" ? *q3 : *q35;
}

// Spans are ordered, disjoint, and with the tool docs, preamble and generation prompt tile the text;
// each placed content is the message's text, trimmed as the template trims it.
void check_spans(const RenderedChat& r, const Conversation& c, const std::string& name) {
  ASSERT_EQ(r.messages.size(), c.messages.size()) << name;
  ASSERT_EQ(r.content.size(), c.messages.size()) << name;
  std::vector<TextSpan> all;
  if (r.preamble.size()) all.push_back(r.preamble);
  if (r.tools) all.push_back(*r.tools);
  for (auto& s : r.messages) all.push_back(s);
  std::sort(all.begin(), all.end(), [](const TextSpan& a, const TextSpan& b) { return a.begin < b.begin; });
  size_t pos = 0;
  for (auto& s : all) {
    EXPECT_EQ(s.begin, pos) << name;
    pos = s.end;
  }
  EXPECT_EQ(r.generation_prompt.begin, pos) << name;
  EXPECT_EQ(r.generation_prompt.end, r.text.size()) << name;
  for (size_t i = 0; i < r.content.size(); ++i) {
    const ContentPlacement& p = r.content[i];
    if (p.at == std::string::npos) continue;
    EXPECT_GE(p.at, r.messages[i].begin) << name << " message " << i;
    EXPECT_LE(p.at + p.length, r.messages[i].end) << name << " message " << i;
    EXPECT_EQ(r.text.substr(p.at, p.length), c.messages[i].content.substr(p.skipped, p.length)) << name << " " << i;
  }
}

Conversation conversation_of(const Json& g) {
  Json conv_json = {{"messages", g["messages"]}};
  if (g.contains("tools")) conv_json["tools"] = g["tools"];
  return parse_openai_conversation(conv_json, g["name"].get<std::string>());
}

RenderOptions options_of(const Json& g) {
  RenderOptions opts;
  opts.add_generation_prompt = g["add_generation_prompt"];
  if (g.contains("enable_thinking")) opts.enable_thinking = g["enable_thinking"].get<bool>();
  return opts;
}

TEST(ChatFormat, BothFormatsMatchTransformersApplyChatTemplate) {
  const Json goldens = Json::parse(slurp(kDir + "chat/goldens.json"));
  std::map<std::string, int> per_format;
  for (const auto& g : goldens) {
    const std::string name = g["format"].get<std::string>() + "/" + g["name"].get<std::string>();
    const ChatFormat& f = format(g["format"]);
    EXPECT_EQ(f.name(), g["format"].get<std::string>());
    const Conversation conv = conversation_of(g);
    if (g.contains("error")) {
      EXPECT_THROW(f.render(conv, options_of(g)), InvalidArgument) << name << " (the template raises: " << g["error"] << ")";
      continue;
    }
    const RenderedChat r = f.render(conv, options_of(g));
    EXPECT_EQ(r.text, g["expected"].get<std::string>()) << name;
    check_spans(r, conv, name);
    ++per_format[g["format"]];
  }
  EXPECT_GE(per_format["qwen3"], 20);
  EXPECT_GE(per_format["qwen3.5"], 20);
}

TEST(ChatFormat, ToolDocsSpanAndGroupedToolResponses) {
  const Json j = Json::parse(R"({
    "tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}],
    "messages": [{"role": "system", "content": "S"}, {"role": "user", "content": "q"},
                 {"role": "assistant", "content": null, "tool_calls": [{"function": {"name": "f", "arguments": {}}},
                                                                      {"function": {"name": "f", "arguments": "{}"}}]},
                 {"role": "tool", "content": "r1"}, {"role": "tool", "content": "r2"}]})");
  const Conversation c = parse_openai_conversation(j, "inline");
  for (const char* name : {"qwen3", "qwen3.5"}) {
    const RenderedChat r = format(name).render(c, {});
    ASSERT_TRUE(r.tools) << name;
    const std::string docs = r.text.substr(r.tools->begin, r.tools->size());
    EXPECT_NE(docs.find("<tools>\n{\"type\": \"function\""), std::string::npos) << name;
    EXPECT_EQ(r.text.substr(r.messages[3].begin, r.messages[3].size()),
              "<|im_start|>user\n<tool_response>\nr1\n</tool_response>") << name;
    EXPECT_EQ(r.text.substr(r.messages[4].begin, r.messages[4].size()),
              "\n<tool_response>\nr2\n</tool_response><|im_end|>\n") << name;
    EXPECT_EQ(r.text.substr(r.generation_prompt.begin), format(name).generation_prompt(std::nullopt)) << name;
  }
  // Qwen3 writes the system text before the tool docs, Qwen3.5 after them.
  EXPECT_LT(format("qwen3").render(c, {}).messages[0].begin, format("qwen3").render(c, {}).tools->begin);
  EXPECT_GT(format("qwen3.5").render(c, {}).messages[0].begin, format("qwen3.5").render(c, {}).tools->begin);
  EXPECT_NE(format("qwen3.5").render(c, {}).text.find("<tool_call>\n<function=f>\n</function>\n</tool_call>\n<tool_call>"),
            std::string::npos);
}

TEST(ChatFormat, DetectionStopTokensAndWhatEachFormatReports) {
  EXPECT_EQ(make_chat_format(slurp(kDir + "chat/qwen3.5_chat_template.jinja"), "t")->name(), "qwen3.5");
  EXPECT_EQ(make_chat_format(slurp(kDir + "chat/qwen3_chat_template.jinja"), "t")->name(), "qwen3");
  // The tiny fixture models carry the Qwen3 template in tokenizer_config.json.
  EXPECT_EQ(load_chat_format(kDir + "models/qwen3_5_dense")->name(), "qwen3");
  const Json stop = Json::parse(slurp(kDir + "chat/qwen3.5_stop.json"));
  std::vector<std::string> want = stop["stop"];
  std::vector<std::string> got = format("qwen3.5").stop_tokens();
  std::sort(want.begin(), want.end());
  std::sort(got.begin(), got.end());
  EXPECT_EQ(got, want);
  for (const char* name : {"qwen3", "qwen3.5"}) {
    const ChatFormat& f = format(name);
    EXPECT_EQ(f.end_of_turn(), "<|im_end|>");
    EXPECT_TRUE(f.history_rule().drops_reasoning_before_last_query);
    EXPECT_EQ(f.generation_prompt(std::nullopt).rfind(f.history_rule().assistant_header, 0), 0u);
    for (const auto& m : f.reserved_markers()) EXPECT_NE(std::find(all_reserved_markers().begin(), all_reserved_markers().end(), m), all_reserved_markers().end());
  }
  EXPECT_EQ(format("qwen3.5").generation_prompt(std::nullopt), "<|im_start|>assistant\n<think>\n");
  EXPECT_EQ(format("qwen3.5").generation_prompt(false), "<|im_start|>assistant\n<think>\n\n</think>\n\n");
  EXPECT_TRUE(format("qwen3.5").generation_starts_in_reasoning(std::nullopt));
  EXPECT_FALSE(format("qwen3.5").generation_starts_in_reasoning(false));
  EXPECT_FALSE(format("qwen3").generation_starts_in_reasoning(std::nullopt));
  const auto& m35 = format("qwen3.5").reserved_markers();
  EXPECT_NE(std::find(m35.begin(), m35.end(), "</parameter>"), m35.end());
}

TEST(ChatFormat, RejectsWhatItCannotRender) {
  auto parse = [](const char* s) { return parse_openai_conversation(Json::parse(s), "conv.json"); };
  for (const char* name : {"qwen3", "qwen3.5"})
    EXPECT_THROW(format(name).render(parse(R"({"messages": [{"role": "developer", "content": "x"}]})"), {}),
                 InvalidArgument);
  EXPECT_THROW(format("qwen3.5").render(parse(R"({"messages": []})"), {}), InvalidArgument);
  EXPECT_THROW(format("qwen3.5").render(parse(R"({"messages": [{"role": "user", "content": "q"},
      {"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": "[1]"}}]}]})"), {}),
               InvalidArgument);
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
  // A Qwen3 template whose generation prompt opens the reasoning section is not the qwen3 format.
  std::string thinking = slurp(kDir + "chat/qwen3_chat_template.jinja");
  const std::string gen = "{{- '<|im_start|>assistant\\n' }}";
  ASSERT_NE(thinking.find(gen), std::string::npos);
  thinking.replace(thinking.find(gen), gen.size(), "{{- '<|im_start|>assistant\\n<think>\\n' }}");
  EXPECT_THROW(make_chat_format(thinking, "thinking.jinja"), ModelError);
  EXPECT_THROW(load_chat_format("/nonexistent-dir"), IoError);
  EXPECT_THROW(load_chat_format("/nonexistent-dir", "/nonexistent-file.jinja"), IoError);
}

TEST(PythonJson, WritesWhatJsonDumpsWrites) {
  // Expected strings are Python 3's json.dumps(x, ensure_ascii=False).
  const auto v = Json::parse(
      R"({"z": 1, "a": [1.0, 0.1, 1e16, 1e15, 1.5e-5, 0.0001, -0.0, 123456789012345680.0, 5e-324],
          "s": "é\n\"\\/\u0001\u007f", "t": true, "n": null, "e": {}, "l": []})");
  EXPECT_EQ(python_json_dumps(v),
            "{\"z\": 1, \"a\": [1.0, 0.1, 1e+16, 1000000000000000.0, 1.5e-05, 0.0001, -0.0, 1.2345678901234568e+17, "
            "5e-324], \"s\": \"é\\n\\\"\\\\/\\u0001\x7f\", \"t\": true, \"n\": null, \"e\": {}, \"l\": []}");
}

TEST(PythonString, StrAndStripAsPython) {
  // Python: str(True), str(None), str(3), str(2.5), str(1e20), str(1e-05), str("x\n").
  EXPECT_EQ(python_str(Json(true)), "True");
  EXPECT_EQ(python_str(Json(nullptr)), "None");
  EXPECT_EQ(python_str(Json(3)), "3");
  EXPECT_EQ(python_str(Json(2.5)), "2.5");
  EXPECT_EQ(python_str(Json(1e20)), "1e+20");
  EXPECT_EQ(python_str(Json(1e-5)), "1e-05");
  EXPECT_EQ(python_str(Json("x\n")), "x\n");
  EXPECT_THROW(python_str(Json::array()), InvalidArgument);
  size_t skipped = 0;
  // "\u3000 a\u200bb\u00a0\u2028".strip() == "a\u200bb" (U+200B is not whitespace in Python).
  EXPECT_EQ(python_strip("\xe3\x80\x80 a\xe2\x80\x8b" "b\xc2\xa0\xe2\x80\xa8", &skipped), "a\xe2\x80\x8b" "b");
  EXPECT_EQ(skipped, 4u);
  EXPECT_EQ(python_strip(" \t\n\x1c\x0b"), "");
  EXPECT_EQ(python_strip("\xc3\xa0"), "\xc3\xa0");  // 'à' ends in byte 0xa0, which is no space on its own
}

}  // namespace
}  // namespace hypic
