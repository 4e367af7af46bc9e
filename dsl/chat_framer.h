// Chat framing as the plan needs it: render a conversation exactly as the model's chat template does,
// and say which bytes each message (and the tool docs) became, so blocks can be cut on those bytes.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace hypic::dsl {

using Json = nlohmann::ordered_json;

struct FrameMessage {
  std::string role;  // system | user | assistant | tool
  std::string content;
  Json tool_calls = nullptr;  // assistant: [{"name", "arguments"}] or OpenAI [{"function": {...}}]
  std::optional<std::string> reasoning_content;
};

struct ByteSpan {
  size_t begin = 0;
  size_t end = 0;
};

struct FramedConversation {
  std::string text;
  std::optional<ByteSpan> tools;  // the tool docs, when tools were given
  // Bytes each message contributes. Together with `tools` the spans tile `text` without gaps.
  std::vector<ByteSpan> messages;
  // Where message i's content appears verbatim in `text`, or npos when the template rewrites it.
  std::vector<size_t> content_at;
};

class ChatFramer {
 public:
  virtual ~ChatFramer() = default;
  virtual std::string name() const = 0;
  // `tools` is an array of OpenAI-style {"type": "function", "function": {name, description, parameters}}.
  virtual FramedConversation frame(const std::vector<FrameMessage>& messages, const Json& tools) const = 0;
  // What the template appends to ask for the assistant's reply; `thinking` false closes an empty think section.
  virtual std::string generation_prompt(std::optional<bool> thinking) const = 0;
  // Strings that variable text must never contain (the model's special tokens and structural tags).
  virtual std::vector<std::string> reserved_markers() const = 0;
};

}  // namespace hypic::dsl
