// Parsing a model's generated reply as it streams: reasoning (<think>...</think>), free text, and tool
// calls (<tool_call>...</tool_call>, whose body each chat format writes its own way). Fed the text
// pieces of the generated tokens, the parser releases text as soon as it cannot belong to a tool call
// (only a possible prefix of the opening tag is held back) and a tool call as soon as its closing tag
// arrives — what a server needs to stream OpenAI deltas. It never throws on model output: every call
// that cannot be used becomes a ToolCallError, meant to go back to the model as the tool's answer.
#pragma once
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace hypic {

struct ParsedToolCall {
  std::string name;
  nlohmann::ordered_json arguments;  // always a JSON object
  size_t begin = 0, end = 0;         // byte range of the whole <tool_call>...</tool_call> block in the reply
};

struct ToolCallError {
  enum class Kind {
    kUnterminated,  // <tool_call> without </tool_call> (generation stopped inside the block)
    kInvalidJson,   // JSON format: the body is not JSON
    kBadShape,      // the body is not a call of this format (no name, arguments not an object, ...)
    kUnknownTool,   // a name the prompt offered no tool for
  };
  Kind kind;
  std::string message;  // says what is wrong, for logs and for feeding back to the model
  std::string body;     // the raw text between the tags
  size_t begin = 0, end = 0;
};

// One thing the parser released, in reply order.
struct ReplyEvent {
  enum class Kind { kReasoning, kText, kToolCall, kError };
  Kind kind;
  std::string text;     // kReasoning / kText: the released piece
  ParsedToolCall call;  // kToolCall
  ToolCallError error;  // kError
};

// The body of one <tool_call> block, parsed by a format's rules.
class ToolCallBodyParser {
 public:
  virtual ~ToolCallBodyParser() = default;
  // A kToolCall or a kError event (begin/end are set by the caller).
  virtual ReplyEvent parse(std::string_view body) const = 0;
};

class ToolCallStreamParser {
 public:
  // `starts_in_reasoning`: the prompt ended inside an open <think> section.
  ToolCallStreamParser(std::unique_ptr<ToolCallBodyParser> body, bool starts_in_reasoning);

  // A piece of generated text (any split, even inside a UTF-8 character); appends what became final.
  void push(std::string_view piece, std::vector<ReplyEvent>& out);
  // The reply ended: releases what was held; an open tool call becomes a kUnterminated error.
  void finish(std::vector<ReplyEvent>& out);

 private:
  enum class State { kStart, kReasoning, kText, kCall };
  void drain(bool final, std::vector<ReplyEvent>& out);
  void emit_text(ReplyEvent::Kind kind, std::string_view s, std::vector<ReplyEvent>& out);

  std::unique_ptr<ToolCallBodyParser> body_;
  State state_;
  std::string buf_;         // received, not yet released
  size_t buf_offset_ = 0;   // reply offset of buf_[0]
  size_t call_begin_ = 0;   // reply offset of the open call's <tool_call>
  size_t scanned_ = 0;      // kCall: bytes of buf_ already searched for the closing tag
  bool reasoning_started_ = false;  // leading newlines of the reasoning are dropped
  bool text_started_ = false;  // leading whitespace of the answer text is dropped
};

struct AssistantOutput {
  std::string reasoning;  // text inside <think>...</think> (trimmed of newlines), if any
  std::string content;    // the rest without tool-call blocks, surrounding whitespace trimmed
  std::vector<ParsedToolCall> tool_calls;
  std::vector<ToolCallError> errors;
};

// Collects events into one reply.
AssistantOutput collect_reply(const std::vector<ReplyEvent>& events);

// Parses JSON text from the model, refusing nesting deeper than 256 before the parser recurses; false
// when it is not JSON.
bool parse_bounded_json(std::string_view text, nlohmann::ordered_json* out);

// The function entry of `tools` (an OpenAI tools array, wrapped or not) named `name`, or null.
const nlohmann::ordered_json* find_tool(const nlohmann::ordered_json& tools, const std::string& name);
// The kUnknownTool error for `name`, listing the tools there are.
ToolCallError unknown_tool_error(const nlohmann::ordered_json& tools, const std::string& name, std::string_view body);

// Body parser of the Qwen3 (Hermes) format: {"name": ..., "arguments": {...}}. `tools`: see
// ChatFormat::tool_call_parser.
std::unique_ptr<ToolCallBodyParser> json_tool_call_body_parser(const nlohmann::ordered_json& tools);

}  // namespace hypic
