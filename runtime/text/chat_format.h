// Chat formats: render an OpenAI-style conversation into the exact prompt text a model's own chat
// template produces, and say where every message lies in it (prompt blocks map to cached segments).
//
// Each model family implements ChatFormat natively (no Jinja engine); make_chat_format() picks the
// implementation that matches a model's chat_template, so adding a family means adding a class and
// one detection rule.
#pragma once
#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace hypic {

struct ToolCall {
  std::string id;    // OpenAI's call id (not rendered by every format)
  std::string name;
  // As the caller gave it: a JSON string is written verbatim, any other JSON value is serialized.
  nlohmann::ordered_json arguments = nlohmann::ordered_json::object();
};

struct ChatMessage {
  std::string role;     // "system", "user", "assistant" or "tool"
  std::string content;  // OpenAI's null content is ""
  // Reasoning given separately (OpenAI-compatible servers' reasoning_content); unset means "take it
  // from <think>...</think> in content, if any".
  std::optional<std::string> reasoning_content;
  std::vector<ToolCall> tool_calls;  // assistant only
  std::string tool_call_id;          // tool only
};

struct Conversation {
  std::vector<ChatMessage> messages;
  // OpenAI `tools` array (function schemas), kept in the caller's key order.
  nlohmann::ordered_json tools = nlohmann::ordered_json::array();
};

// Parses {"messages": [...], "tools": [...]} in OpenAI chat-completions form. Content must be a
// string or null; tool_calls entries may have the {"function": {...}} wrapper or not. `where` names
// the source in InvalidArgument / FormatError messages (with the message index).
Conversation parse_openai_conversation(const nlohmann::ordered_json& j, const std::string& where);

struct RenderOptions {
  bool add_generation_prompt = true;
  // The template variable enable_thinking; unset = not passed to the template.
  std::optional<bool> enable_thinking;
};

struct TextSpan {
  size_t begin = 0, end = 0;  // byte range [begin, end) in RenderedChat::text
  size_t size() const { return end - begin; }
};

struct RenderedChat {
  std::string text;
  // One span per input message, in order: the bytes that message produced (a first system message
  // owns the system header, tools included). Spans do not overlap and appear in order; text between
  // or around them belongs to `preamble` or `generation_prompt`.
  std::vector<TextSpan> messages;
  TextSpan preamble;           // text before the first message's span that no message owns (e.g. tools header)
  TextSpan generation_prompt;  // the assistant header added by add_generation_prompt (empty if off)
};

class ChatFormat {
 public:
  virtual ~ChatFormat() = default;
  virtual std::string name() const = 0;
  // InvalidArgument for a conversation the format cannot express (unknown role, ...).
  virtual RenderedChat render(const Conversation& conv, const RenderOptions& opts) const = 0;
};

// The native format for a chat_template text; ModelError naming `where` if no format matches.
std::unique_ptr<ChatFormat> make_chat_format(const std::string& chat_template, const std::string& where);

// Reads the chat template of a model directory (tokenizer_config.json "chat_template", or
// chat_template.jinja beside it) and returns its format.
std::unique_ptr<ChatFormat> load_chat_format(const std::string& model_dir);

}  // namespace hypic
