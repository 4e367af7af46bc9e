// Tool-call extraction from generated text: good calls, and malformed output as structured errors.
#include "runtime/text/tool_call_parser.h"

#include <gtest/gtest.h>

namespace hypic {
namespace {

TEST(ToolCallParser, ExtractsReasoningContentAndCalls) {
  const std::string text =
      "<think>\nLet me look.\n</think>\n\nChecking both.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
      "{\"city\": \"Paris\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"search\", \"arguments\": \"{\\\"q\\\": \\\"x\\\"}\"}\n"
      "</tool_call>";
  const AssistantOutput out = parse_assistant_output(text);
  EXPECT_EQ(out.reasoning, "Let me look.");
  EXPECT_EQ(out.content, "Checking both.");
  ASSERT_EQ(out.tool_calls.size(), 2u);
  EXPECT_TRUE(out.errors.empty());
  EXPECT_EQ(out.tool_calls[0].name, "get_weather");
  EXPECT_EQ(out.tool_calls[0].arguments.dump(), "{\"city\":\"Paris\"}");
  EXPECT_EQ(out.tool_calls[1].arguments.dump(), "{\"q\":\"x\"}");  // string arguments are decoded
  EXPECT_EQ(text.substr(out.tool_calls[0].begin, 11), "<tool_call>");
  EXPECT_EQ(text.substr(out.tool_calls[1].end - 12, 12), "</tool_call>");
}

TEST(ToolCallParser, PlainTextHasNoCalls) {
  const AssistantOutput out = parse_assistant_output("  Just an answer.\n");
  EXPECT_EQ(out.content, "Just an answer.");
  EXPECT_TRUE(out.tool_calls.empty());
  EXPECT_TRUE(out.errors.empty());
  EXPECT_TRUE(parse_assistant_output("").content.empty());
}

TEST(ToolCallParser, MalformedBlocksBecomeErrorsNotCrashes) {
  const AssistantOutput out = parse_assistant_output(
      "<tool_call>{\"name\": \"f\", \"arguments\": {</tool_call>"      // invalid JSON
      "<tool_call>[1, 2]</tool_call>"                                  // not an object
      "<tool_call>{\"arguments\": {}}</tool_call>"                     // no name
      "<tool_call>{\"name\": \"f\", \"arguments\": 3}</tool_call>"     // bad arguments
      "<tool_call>{\"name\": \"f\", \"arguments\": \"nope\"}</tool_call>"
      "<tool_call>{\"name\": \"ok\"}</tool_call>"                      // arguments default to {}
      "<tool_call>{\"name\": \"g\", \"arguments\": {\"a\"");          // generation cut off
  ASSERT_EQ(out.tool_calls.size(), 1u);
  EXPECT_EQ(out.tool_calls[0].name, "ok");
  EXPECT_TRUE(out.tool_calls[0].arguments.is_object());
  ASSERT_EQ(out.errors.size(), 6u);
  EXPECT_EQ(out.errors[0].kind, ToolCallError::Kind::kInvalidJson);
  EXPECT_EQ(out.errors[1].kind, ToolCallError::Kind::kBadShape);
  EXPECT_EQ(out.errors[2].kind, ToolCallError::Kind::kBadShape);
  EXPECT_EQ(out.errors[3].kind, ToolCallError::Kind::kBadShape);
  EXPECT_EQ(out.errors[4].kind, ToolCallError::Kind::kBadShape);
  EXPECT_EQ(out.errors[5].kind, ToolCallError::Kind::kUnterminated);
  EXPECT_EQ(out.errors[1].body, "[1, 2]");
}

TEST(ToolCallParser, PathologicalNestingIsAnError) {
  std::string deep = "<tool_call>{\"name\": \"f\", \"arguments\": " + std::string(100000, '[') + "</tool_call>";
  const AssistantOutput out = parse_assistant_output(deep);
  EXPECT_TRUE(out.tool_calls.empty());
  ASSERT_EQ(out.errors.size(), 1u);
  EXPECT_EQ(out.errors[0].kind, ToolCallError::Kind::kInvalidJson);
}

}  // namespace
}  // namespace hypic
