// Parses a model's generated assistant text in the Qwen/Hermes format: optional <think>reasoning</think>,
// free content, and <tool_call>{"name": ..., "arguments": {...}}</tool_call> blocks. Never throws on
// model output: every block that cannot be used becomes a ToolCallError.
#pragma once
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace hypic {

struct ParsedToolCall {
  std::string name;
  nlohmann::ordered_json arguments;  // always a JSON object
  size_t begin = 0, end = 0;         // byte range of the whole <tool_call>...</tool_call> block
};

struct ToolCallError {
  enum class Kind {
    kUnterminated,     // <tool_call> without </tool_call> (generation stopped inside the block)
    kInvalidJson,      // the body is not JSON
    kBadShape,         // JSON, but not {"name": string, "arguments": object or JSON-object string}
  };
  Kind kind;
  std::string message;  // says what is wrong, for logs and for feeding back to the model
  std::string body;     // the raw text between the tags
  size_t begin = 0, end = 0;
};

struct AssistantOutput {
  std::string reasoning;  // text inside <think>...</think> (trimmed of newlines), if any
  std::string content;    // the rest without tool-call blocks, surrounding whitespace trimmed
  std::vector<ParsedToolCall> tool_calls;
  std::vector<ToolCallError> errors;
};

AssistantOutput parse_assistant_output(std::string_view text);

}  // namespace hypic
