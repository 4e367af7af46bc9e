// The Qwen3.5 XML tool-call body: parameters typed by the tool's JSON schema, strings kept raw,
// malformed and truncated calls as typed errors, whole and split at every byte.
#include "runtime/text/xml_tool_call_parser.h"

#include <gtest/gtest.h>

#include "tests/runtime/text/reply_parsing.h"

namespace hypic {
namespace {

using K = ToolCallError::Kind;
using test::ReplyCase;

const nlohmann::ordered_json& tools() {
  static const auto t = nlohmann::ordered_json::parse(R"([
    {"type": "function", "function": {"name": "write_file", "parameters": {"type": "object", "properties": {
      "path": {"type": "string"}, "content": {"type": "string"}, "count": {"type": "integer"},
      "ratio": {"type": "number"}, "overwrite": {"type": "boolean"}, "meta": {"type": "object"},
      "tags": {"type": "array", "items": {"type": "string"}}, "mode": {"type": ["integer", "null"]},
      "level": {"anyOf": [{"type": "null"}, {"type": "number"}]}, "kind": {"enum": ["a", "b"]}}}}},
    {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
      "properties": {"city": {"type": "string"}}}}}])");
  return t;
}

test::ParserFactory with_tools() {
  return [](bool r) { return std::make_unique<ToolCallStreamParser>(xml_tool_call_body_parser(tools()), r); };
}

// One <tool_call> block as the template writes it.
std::string xml_call(const std::string& name, const std::vector<std::pair<std::string, std::string>>& params) {
  std::string s = "<tool_call>\n<function=" + name + ">\n";
  for (auto& [k, v] : params) s += "<parameter=" + k + ">\n" + v + "\n</parameter>\n";
  return s + "</function>\n</tool_call>";
}

std::string w(const std::string& args) { return R"({"name": "write_file", "arguments": )" + args + "}"; }

std::vector<ReplyCase> cases() {
  const std::string paris = xml_call("get_weather", {{"city", "Paris"}});
  const std::string paris_json = R"({"name": "get_weather", "arguments": {"city": "Paris"}})";
  return {
      {"one_string_param", paris, "", "", {paris_json}, {}},
      {"text_then_call", "I will check.\n\n" + paris, "", "I will check.", {paris_json}, {}},
      {"multi_line_string", xml_call("write_file", {{"path", "a.txt"}, {"content", "line one\nline two\n\n  indented"}}),
       "", "", {w(R"({"path": "a.txt", "content": "line one\nline two\n\n  indented"})")}, {}},
      {"string_spaces_kept", xml_call("write_file", {{"content", "  padded  "}}), "", "", {w(R"({"content": "  padded  "})")},
       {}},
      {"string_looks_like_number", xml_call("write_file", {{"path", "42"}}), "", "", {w(R"({"path": "42"})")}, {}},
      {"string_null_is_text", xml_call("write_file", {{"path", "null"}}), "", "", {w(R"({"path": "null"})")}, {}},
      {"string_with_markup", xml_call("write_file", {{"content", "<b>bold</b> & <i>"}}), "", "",
       {w(R"({"content": "<b>bold</b> & <i>"})")}, {}},
      {"integer", xml_call("write_file", {{"count", "12"}}), "", "", {w(R"({"count": 12})")}, {}},
      {"negative_integer", xml_call("write_file", {{"count", "-3"}}), "", "", {w(R"({"count": -3})")}, {}},
      {"integer_not_a_number_stays_text", xml_call("write_file", {{"count", "twelve"}}), "", "",
       {w(R"({"count": "twelve"})")}, {}},
      {"number_float", xml_call("write_file", {{"ratio", "2.5"}}), "", "", {w(R"({"ratio": 2.5})")}, {}},
      {"number_integral", xml_call("write_file", {{"ratio", "3.0"}}), "", "", {w(R"({"ratio": 3})")}, {}},
      {"number_exponent", xml_call("write_file", {{"ratio", "1e-3"}}), "", "", {w(R"({"ratio": 0.001})")}, {}},
      {"boolean_true", xml_call("write_file", {{"overwrite", "true"}}), "", "", {w(R"({"overwrite": true})")}, {}},
      {"boolean_capitalized", xml_call("write_file", {{"overwrite", "False"}}), "", "", {w(R"({"overwrite": false})")}, {}},
      {"boolean_invalid_stays_text", xml_call("write_file", {{"overwrite", "yes"}}), "", "", {w(R"({"overwrite": "yes"})")},
       {}},
      {"object", xml_call("write_file", {{"meta", R"({"owner": "me", "n": [1, {"deep": null}]})"}}), "", "",
       {w(R"({"meta": {"owner": "me", "n": [1, {"deep": null}]}})")}, {}},
      {"object_multi_line", xml_call("write_file", {{"meta", "{\n  \"a\": 1,\n  \"b\": [true]\n}"}}), "", "",
       {w(R"({"meta": {"a": 1, "b": [true]}})")}, {}},
      {"array", xml_call("write_file", {{"tags", R"(["x", "ü"])"}}), "", "", {w(R"({"tags": ["x", "ü"]})")}, {}},
      {"object_invalid_stays_text", xml_call("write_file", {{"meta", "{owner: me}"}}), "", "",
       {w(R"({"meta": "{owner: me}"})")}, {}},
      {"null_for_integer", xml_call("write_file", {{"count", "null"}}), "", "", {w(R"({"count": null})")}, {}},
      {"type_list", xml_call("write_file", {{"mode", "644"}}), "", "", {w(R"({"mode": 644})")}, {}},
      {"any_of", xml_call("write_file", {{"level", "0.5"}}), "", "", {w(R"({"level": 0.5})")}, {}},
      {"enum_is_string", xml_call("write_file", {{"kind", "a"}}), "", "", {w(R"({"kind": "a"})")}, {}},
      {"param_not_in_schema_is_text", xml_call("write_file", {{"extra", "5"}}), "", "", {w(R"({"extra": "5"})")}, {}},
      {"no_parameters", "<tool_call>\n<function=get_weather>\n</function>\n</tool_call>", "", "",
       {R"({"name": "get_weather", "arguments": {}})"}, {}},
      {"parameter_order_kept", xml_call("write_file", {{"path", "p"}, {"count", "1"}, {"content", "c"}}), "", "",
       {w(R"({"path": "p", "count": 1, "content": "c"})")}, {}},
      {"parallel_calls", paris + "\n" + xml_call("get_weather", {{"city", "東京"}}), "", "",
       {paris_json, R"({"name": "get_weather", "arguments": {"city": "東京"}})"}, {}},
      {"missing_parameter_closer", "<tool_call>\n<function=write_file>\n<parameter=path>\na\n<parameter=count>\n2\n"
                                   "</parameter>\n</function>\n</tool_call>",
       "", "", {w(R"({"path": "a", "count": 2})")}, {}},
      {"missing_function_closer", "<tool_call>\n<function=get_weather>\n<parameter=city>\nRome\n</parameter>\n</tool_call>",
       "", "", {R"({"name": "get_weather", "arguments": {"city": "Rome"}})"}, {}},
      {"names_trimmed", "<tool_call>\n<function= get_weather >\n<parameter= city >\nOslo\n</parameter>\n</function>\n"
                        "</tool_call>",
       "", "", {R"({"name": "get_weather", "arguments": {"city": "Oslo"}})"}, {}},
      {"unknown_tool", xml_call("launch", {{"x", "1"}}), "", "", {}, {K::kUnknownTool}},
      {"no_function", "<tool_call>\n{\"name\": \"get_weather\"}\n</tool_call>", "", "", {}, {K::kBadShape}},
      {"function_tag_unclosed", "<tool_call>\n<function=get_weather\n</tool_call>", "", "", {}, {K::kBadShape}},
      {"empty_function_name", "<tool_call>\n<function=>\n</function>\n</tool_call>", "", "", {}, {K::kBadShape}},
      {"parameter_tag_unclosed", "<tool_call>\n<function=get_weather>\n<parameter=city\n</function>\n</tool_call>", "", "",
       {}, {K::kBadShape}},
      {"duplicate_parameter", xml_call("get_weather", {{"city", "a"}, {"city", "b"}}), "", "", {}, {K::kBadShape}},
      {"two_functions", "<tool_call>\n<function=get_weather>\n</function>\n<function=get_weather>\n</function>\n"
                        "</tool_call>",
       "", "", {}, {K::kBadShape}},
      {"text_before_function", "<tool_call>\nsure: <function=get_weather>\n</function>\n</tool_call>", "", "", {},
       {K::kBadShape}},
      {"truncated_in_parameter", "Saving.\n<tool_call>\n<function=write_file>\n<parameter=content>\nhalf a fi", "",
       "Saving.", {}, {K::kUnterminated}},
      {"truncated_after_function", paris + "\n<tool_call>\n<function=get_weather>\n", "", "", {paris_json},
       {K::kUnterminated}},
      {"reasoning_then_call", "The user wants weather.\n</think>\n\nLet me check.\n\n" + paris, "The user wants weather.",
       "Let me check.", {paris_json}, {}, true},
      {"reasoning_only_answer", "Easy.\n</think>\n\n4", "Easy.", "4", {}, {}, true},
  };
}

TEST(XmlToolCallParser, CasesWholeAndSplitAtEveryByte) {
  const auto all = cases();
  ASSERT_GE(all.size(), 30u);
  for (const auto& c : all) test::check_case(with_tools(), c);
}

TEST(XmlToolCallParser, WithoutAToolListEveryValueIsText) {
  auto any = [](bool r) {
    return std::make_unique<ToolCallStreamParser>(xml_tool_call_body_parser(nlohmann::ordered_json::array()), r);
  };
  test::check_case(any, {"untyped", xml_call("anything", {{"n", "12"}, {"o", "{}"}}), "", "",
                         {R"({"name": "anything", "arguments": {"n": "12", "o": "{}"}})"}, {}});
}

TEST(XmlToolCallParser, ReleasesCallsOnTheirClosingTag) {
  test::check_eager_release(with_tools(), "Saving <now>.\n" + xml_call("write_file", {{"content", "a </tool_cal b"}}) +
                                              "\n" + xml_call("get_weather", {{"city", "x"}}));
}

TEST(XmlToolCallParser, TypedValues) {
  const auto schema = nlohmann::ordered_json::parse(R"({"type": "integer"})");
  EXPECT_EQ(typed_parameter_value(" 7 ", &schema), 7);
  EXPECT_EQ(typed_parameter_value("7.5", &schema), "7.5");  // not an integer: the tool says so
  EXPECT_EQ(typed_parameter_value("x", nullptr), "x");
  const auto deep = nlohmann::ordered_json::parse(R"({"type": "object"})");
  EXPECT_EQ(typed_parameter_value(std::string(1000, '['), &deep), std::string(1000, '['));  // bounded, no recursion
}

}  // namespace
}  // namespace hypic
