// Chat formats: one object per chat-template family says everything hypic needs to know about the
// model's chat markup — how a conversation renders (byte-exact with the model's own Jinja template),
// where every message and the tool docs lie in that text (prompt blocks map to cached segments), the
// generation prompt, the end-of-turn and stop tokens, the markers that variable text must never
// contain, how earlier turns are re-rendered, and how the model writes tool calls (a streaming parser).
//
// Each family implements ChatFormat natively (no Jinja engine); make_chat_format() picks the one whose
// detection rule matches a template, so adding a family means adding a class and one rule.
#pragma once
#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/text/tool_call_parser.h"

namespace hypic {

struct ToolCall {
  std::string id;    // OpenAI's call id (not rendered by every format)
  std::string name;
  // As the caller gave it: a JSON object, or a JSON string holding the object (OpenAI's wire form).
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

// Where a message's content landed in the text. Templates may trim it: `skipped` leading bytes of the
// content were dropped and the `length` bytes after them appear verbatim at `at`.
struct ContentPlacement {
  size_t at = std::string::npos;  // npos: the content is rewritten (not a verbatim substring)
  size_t skipped = 0;
  size_t length = 0;
};

struct RenderedChat {
  std::string text;
  // One span per input message, in order: the bytes that message produced. Spans do not overlap and
  // appear in order; `tools`, `preamble` and `generation_prompt` cover the rest, so together they tile
  // `text`.
  std::vector<TextSpan> messages;
  std::vector<ContentPlacement> content;  // one per message
  // The tool docs when tools were given; they lie inside the system turn, before or after the system
  // message's own text depending on the family (so they may precede messages[0]).
  std::optional<TextSpan> tools;
  TextSpan preamble;           // leading text that neither a message nor the tool docs own
  TextSpan generation_prompt;  // the assistant header added by add_generation_prompt (empty if off)
};

// How a family re-renders earlier turns, which decides how conversation history stays reusable.
struct HistoryRule {
  // Assistant turns before the last real user query are rendered without their reasoning (Qwen3,
  // Qwen3.5: `loop.index0 > ns.last_query_index`), so a reply's tokens as generated differ from the
  // same reply as history: a session keeps a checkpoint at the end of each prompt to continue from.
  bool drops_reasoning_before_last_query = false;
  // How an earlier assistant turn starts when re-rendered; the generation prompt may go further (an
  // opened <think>), and the checkpoint is taken before that part.
  std::string assistant_header;
};

class ChatFormat {
 public:
  virtual ~ChatFormat() = default;
  virtual std::string name() const = 0;

  // InvalidArgument for a conversation the format cannot express (unknown role, ...).
  virtual RenderedChat render(const Conversation& conv, const RenderOptions& opts) const = 0;
  // What the template appends to ask for the assistant's reply.
  virtual std::string generation_prompt(std::optional<bool> enable_thinking) const = 0;
  // Whether a reply generated after that prompt starts inside the reasoning section.
  virtual bool generation_starts_in_reasoning(std::optional<bool> enable_thinking) const = 0;

  // The marker that ends a turn in the text (what follows a generated reply's last token).
  virtual std::string end_of_turn() const = 0;
  // Special tokens that end generation, besides the tokenizer config's eos token.
  virtual std::vector<std::string> stop_tokens() const = 0;
  // Strings that variable text must never carry: special tokens and structural tags of this format.
  // (Any <|name|> token is refused as well; see dsl/markup.h.)
  virtual std::vector<std::string> reserved_markers() const = 0;
  virtual HistoryRule history_rule() const = 0;

  // A streaming parser for the model's replies. `tools` (the OpenAI tools array the prompt showed)
  // names the callable tools and types the arguments of formats that write them as text; empty:
  // any name, arguments untyped.
  virtual std::unique_ptr<ToolCallStreamParser> tool_call_parser(const nlohmann::ordered_json& tools,
                                                                 bool starts_in_reasoning) const = 0;
  // A whole reply at once (the stream parser fed one piece).
  AssistantOutput parse_reply(std::string_view text, const nlohmann::ordered_json& tools,
                              bool starts_in_reasoning) const;
};

// The native format for a chat_template text; ModelError naming `where` if no format matches.
std::unique_ptr<ChatFormat> make_chat_format(const std::string& chat_template, const std::string& where);

// The built-in format used where no model is at hand (prompt plans rendered without a model): Qwen3.
const ChatFormat& default_chat_format();

// Every reserved marker of every format hypic implements (checks that run before a model is known).
const std::vector<std::string>& all_reserved_markers();

// Reads the chat template of a model directory (tokenizer_config.json "chat_template", or
// chat_template.jinja beside it) and returns its format; `template_file`, when given, is read instead.
std::unique_ptr<ChatFormat> load_chat_format(const std::string& model_dir, const std::string& template_file = "");

// The ids that end an assistant turn: the format's stop tokens and the eos token of the model
// directory's tokenizer_config.json, those the vocabulary has. FormatError for a malformed config.
class Tokenizer;
std::vector<int> chat_stop_ids(const ChatFormat& format, const Tokenizer& tokenizer, const std::string& model_dir);

}  // namespace hypic
