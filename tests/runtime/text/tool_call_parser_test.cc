// The streaming reply parser with the Qwen3 (JSON) tool-call body: reasoning, text and calls from
// whole replies and from every split of them, malformed calls as typed errors, eager release.
#include "runtime/text/tool_call_parser.h"

#include <gtest/gtest.h>

#include "tests/runtime/text/reply_parsing.h"

namespace hypic {
namespace {

using K = ToolCallError::Kind;
using test::ReplyCase;

const nlohmann::ordered_json& tools() {
  static const auto t = nlohmann::ordered_json::parse(R"([
    {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
      "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}}}},
    {"type": "function", "function": {"name": "search", "parameters": {"type": "object",
      "properties": {"q": {"type": "string"}}}}}])");
  return t;
}

test::ParserFactory with_tools() {
  return [](bool r) { return std::make_unique<ToolCallStreamParser>(json_tool_call_body_parser(tools()), r); };
}
test::ParserFactory any_tool() {
  return [](bool r) {
    return std::make_unique<ToolCallStreamParser>(json_tool_call_body_parser(nlohmann::ordered_json::array()), r);
  };
}

std::string call(const std::string& json) { return "<tool_call>\n" + json + "\n</tool_call>"; }

std::vector<ReplyCase> cases() {
  const std::string weather = R"({"name": "get_weather", "arguments": {"city": "Paris"}})";
  return {
      {"plain", "Just an answer.", "", "Just an answer.", {}, {}},
      {"empty", "", "", "", {}, {}},
      {"whitespace_only", " \n\t ", "", "", {}, {}},
      {"surrounding_whitespace", "  answer \n", "", "answer", {}, {}},
      {"one_call", call(weather), "", "", {weather}, {}},
      {"text_then_call", "Checking.\n" + call(weather), "", "Checking.", {weather}, {}},
      {"call_then_text", call(weather) + "\nDone.", "", "Done.", {weather}, {}},
      {"parallel_calls", call(weather) + "\n" + call(R"({"name": "search", "arguments": {"q": "x"}})"), "", "",
       {weather, R"({"name": "search", "arguments": {"q": "x"}})"}, {}},
      {"nested_values",
       call(R"({"name": "search", "arguments": {"q": "x", "filter": {"tags": [1, {"deep": [true, null]}], "n": 2.5}}})"),
       "", "", {R"({"name": "search", "arguments": {"q": "x", "filter": {"tags": [1, {"deep": [true, null]}], "n": 2.5}}})"},
       {}},
      {"string_arguments", call(R"({"name": "search", "arguments": "{\"q\": \"x\"}"})"), "", "",
       {R"({"name": "search", "arguments": {"q": "x"}})"}, {}},
      {"multi_line_string_value", call(R"({"name": "search", "arguments": {"q": "line one\nline two"}})"), "", "",
       {R"({"name": "search", "arguments": {"q": "line one\nline two"}})"}, {}},
      {"unicode", "東京の天気 " + call(R"({"name": "get_weather", "arguments": {"city": "東京 😀"}})"), "", "東京の天気",
       {R"({"name": "get_weather", "arguments": {"city": "東京 😀"}})"}, {}},
      {"arguments_missing", call(R"({"name": "search"})"), "", "", {R"({"name": "search", "arguments": {}})"}, {}},
      {"arguments_null", call(R"({"name": "search", "arguments": null})"), "", "",
       {R"({"name": "search", "arguments": {}})"}, {}},
      {"arguments_string_not_object", call(R"({"name": "search", "arguments": "nope"})"), "", "", {}, {K::kBadShape}},
      {"arguments_number", call(R"({"name": "search", "arguments": 3})"), "", "", {}, {K::kBadShape}},
      {"no_name", call(R"({"arguments": {}})"), "", "", {}, {K::kBadShape}},
      {"empty_name", call(R"({"name": "", "arguments": {}})"), "", "", {}, {K::kBadShape}},
      {"name_not_string", call(R"({"name": 7, "arguments": {}})"), "", "", {}, {K::kBadShape}},
      {"invalid_json", call(R"({"name": "search", "arguments": {)"), "", "", {}, {K::kInvalidJson}},
      {"body_is_array", call("[1, 2]"), "", "", {}, {K::kBadShape}},
      {"unknown_tool", call(R"({"name": "launch", "arguments": {}})"), "", "", {}, {K::kUnknownTool}},
      {"truncated_after_open", "Let me see.\n<tool_call>\n{\"name\": \"sea", "", "Let me see.", {}, {K::kUnterminated}},
      {"truncated_mid_close_tag", "<tool_call>\n" + weather + "\n</tool_ca", "", "", {}, {K::kUnterminated}},
      {"call_then_truncated_call", call(weather) + "\n<tool_call>\n{", "", "", {weather}, {K::kUnterminated}},
      {"partial_open_tag_at_end", "See <tool_c", "", "See <tool_c", {}, {}},
      {"look_alike_tag", "a <tool_calling> b <tool_call", "", "a <tool_calling> b <tool_call", {}, {}},
      {"stray_close_tag", "a </tool_call> b", "", "a </tool_call> b", {}, {}},
      {"think_then_answer", "<think>\nLet me think.\n\nMore.\n</think>\n\nThe answer.", "Let me think.\n\nMore.",
       "The answer.", {}, {}},
      {"think_then_call", "<think>need weather</think>\n" + call(weather), "need weather", "", {weather}, {}},
      {"think_after_whitespace", "\n <think>r</think>a", "r", "a", {}, {}},
      {"empty_think", "<think>\n\n</think>\n\nok", "", "ok", {}, {}},
      {"late_think_is_text", "ok <think>x</think>", "", "ok <think>x</think>", {}, {}},
      {"starts_in_reasoning", "thinking...\n</think>\n\nanswer", "thinking...", "answer", {}, {}, true},
      {"starts_in_reasoning_truncated", "still thinking\n", "still thinking", "", {}, {}, true},
      {"starts_in_reasoning_then_call", "r\n</think>\n\n" + call(weather), "r", "", {weather}, {}, true},
      {"tool_call_inside_reasoning_is_reasoning", "<think>maybe <tool_call> later</think>x",
       "maybe <tool_call> later", "x", {}, {}},
  };
}

TEST(ToolCallParser, JsonFormatCasesWholeAndSplitAtEveryByte) {
  const auto all = cases();
  ASSERT_GE(all.size(), 30u);
  for (const auto& c : all) test::check_case(with_tools(), c);
}

TEST(ToolCallParser, WithoutAToolListAnyNameIsACall) {
  test::check_case(any_tool(), {"any_name", call(R"({"name": "launch", "arguments": {"x": 1}})"), "", "",
                                {R"({"name": "launch", "arguments": {"x": 1}})"}, {}});
}

TEST(ToolCallParser, ErrorsSayWhatIsWrongAndKeepTheBody) {
  const AssistantOutput o = collect_reply([] {
    std::vector<ReplyEvent> ev;
    ToolCallStreamParser p(json_tool_call_body_parser(tools()), false);
    p.push("<tool_call>[1, 2]</tool_call><tool_call>{\"name\": \"nope\"}</tool_call>", ev);
    p.finish(ev);
    return ev;
  }());
  ASSERT_EQ(o.errors.size(), 2u);
  EXPECT_EQ(o.errors[0].body, "[1, 2]");
  EXPECT_EQ(o.errors[1].message, "unknown tool 'nope' (tools: get_weather, search)");
}

TEST(ToolCallParser, PathologicalNestingIsAnError) {
  test::check_case(with_tools(), {"deep", "<tool_call>{\"name\": \"search\", \"arguments\": " + std::string(300, '[') +
                                              "</tool_call>", "", "", {}, {K::kInvalidJson}});
  std::vector<ReplyEvent> ev;
  ToolCallStreamParser p(json_tool_call_body_parser(tools()), false);
  p.push("<tool_call>{\"name\": \"f\", \"arguments\": " + std::string(100000, '[') + "</tool_call>", ev);
  p.finish(ev);
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].error.kind, K::kInvalidJson);
}

TEST(ToolCallParser, ReleasesTextEagerlyAndCallsOnTheirClosingTag) {
  const std::string reply = "Some text < with <b>tags</b> and <tool_c a look-alike.\n" +
                            call(R"({"name": "search", "arguments": {"q": "<tool_call>"}})") + " tail <tool";
  test::check_eager_release(with_tools(), reply);
  // Text: after every byte, everything but a possible prefix of "<tool_call>" has been released.
  ToolCallStreamParser p(json_tool_call_body_parser(tools()), false);
  std::vector<ReplyEvent> ev;
  const std::string text = "Plain <t text <tool_ and <";
  for (size_t i = 0; i < text.size(); ++i) {
    p.push(text.substr(i, 1), ev);
    std::string released;
    for (auto& e : ev) released += e.text;
    const std::string seen = text.substr(0, i + 1);
    size_t hold = 0;
    for (size_t k = std::min<size_t>(10, seen.size()); k > 0; --k)
      if (std::string("<tool_call>").compare(0, k, seen, seen.size() - k, k) == 0) {
        hold = k;
        break;
      }
    EXPECT_EQ(released, seen.substr(0, seen.size() - hold)) << "after byte " << i;
  }
}

}  // namespace
}  // namespace hypic
