#include "runtime/text/qwen_chat_format.h"

#include "runtime/error.h"
#include "runtime/text/python_json.h"
#include "runtime/text/python_string.h"

namespace hypic {

namespace {

constexpr const char* kToolsIntro =
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>";
constexpr const char* kToolsOutro =
    "\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
    "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": "
    "<args-json-object>}\n</tool_call><|im_end|>\n";

bool is_tool_response(const std::string& content) {
  return starts_with(content, "<tool_response>") && ends_with(content, "</tool_response>");
}

}  // namespace

bool QwenChatFormat::matches(const std::string& t) {
  // Fragments that identify the Qwen3 template family; "<function=" marks Qwen3.5's XML-style calls,
  // a different format.
  for (const char* frag : {"<|im_start|>", "<tool_call>", "<tool_response>", "</think>", "reasoning_content",
                           "\"arguments\": ", "multi_step_tool"})
    if (t.find(frag) == std::string::npos) return false;
  // A generation prompt that opens <think> itself (the "Thinking" variants) is a different format:
  // refused rather than rendered with the wrong prompt.
  return t.find("<function=") == std::string::npos && t.find("assistant\\n<think>\\n'") == std::string::npos;
}

RenderedChat QwenChatFormat::render(const Conversation& conv, const RenderOptions& opts) const {
  const auto& msgs = conv.messages;
  const size_t n = msgs.size();
  for (size_t i = 0; i < n; ++i) {
    const std::string& r = msgs[i].role;
    if (r != "system" && r != "user" && r != "assistant" && r != "tool")
      throw InvalidArgument("messages[" + std::to_string(i) + "]: role \"" + r +
                            "\" is not one the qwen3 chat format renders (system, user, assistant, tool)");
  }
  RenderedChat out;
  out.messages.assign(n, TextSpan{});
  out.content.assign(n, ContentPlacement{});
  std::string& s = out.text;
  const bool first_is_system = n > 0 && msgs[0].role == "system";
  auto verbatim = [&](size_t i, const std::string& content) {
    out.content[i] = {s.size(), 0, content.size()};
    s += content;
  };

  // Header: the system turn (system text first, then the tool docs when tools are given).
  const bool has_tools = conv.tools.is_array() && !conv.tools.empty();
  if (has_tools) {
    s += "<|im_start|>system\n";
    if (first_is_system) {
      verbatim(0, msgs[0].content);
      s += "\n\n";
      out.messages[0] = {0, s.size()};
    }
    const size_t tools_begin = s.size();
    s += kToolsIntro;
    for (const auto& tool : conv.tools) s += "\n" + python_json_dumps(tool);
    s += kToolsOutro;
    // Without a system message the whole system turn is the tool docs.
    out.tools = TextSpan{first_is_system ? tools_begin : 0, s.size()};
  } else if (first_is_system) {
    s += "<|im_start|>system\n";
    verbatim(0, msgs[0].content);
    s += "<|im_end|>\n";
    out.messages[0] = {0, s.size()};
  }

  // The last real user query: reasoning is only shown for assistant turns after it. User turns that
  // merely carry tool responses do not count.
  size_t last_query = n == 0 ? 0 : n - 1;
  for (size_t k = n; k-- > 0;) {
    if (msgs[k].role == "user" && !is_tool_response(msgs[k].content)) {
      last_query = k;
      break;
    }
  }

  for (size_t i = 0; i < n; ++i) {
    const ChatMessage& m = msgs[i];
    if (i == 0 && first_is_system) continue;
    const size_t begin = s.size();
    if (m.role == "user" || m.role == "system") {
      s += "<|im_start|>" + m.role + "\n";
      verbatim(i, m.content);
      s += "<|im_end|>\n";
    } else if (m.role == "assistant") {
      std::string content = m.content;
      std::string reasoning;
      bool rewritten = false;
      if (m.reasoning_content) {
        reasoning = *m.reasoning_content;
      } else if (m.content.find("</think>") != std::string::npos) {
        content = lstrip_newlines(split_last(m.content, "</think>"));
        reasoning = lstrip_newlines(split_last(rstrip_newlines(split_first(m.content, "</think>")), "<think>"));
        rewritten = true;
      }
      const bool after_query = i > last_query;
      if (after_query && (i + 1 == n || !reasoning.empty())) {
        s += "<|im_start|>assistant\n<think>\n" + lstrip_newlines(rstrip_newlines(reasoning)) + "\n</think>\n\n";
        const std::string shown = lstrip_newlines(content);
        if (!rewritten) out.content[i] = {s.size(), content.size() - shown.size(), shown.size()};
        s += shown;
      } else {
        s += "<|im_start|>assistant\n";
        if (!rewritten) out.content[i] = {s.size(), 0, content.size()};
        s += content;
      }
      for (size_t k = 0; k < m.tool_calls.size(); ++k) {
        const ToolCall& tc = m.tool_calls[k];
        if (k > 0 || !content.empty()) s += "\n";
        s += "<tool_call>\n{\"name\": \"" + tc.name + "\", \"arguments\": ";
        s += tc.arguments.is_string() ? tc.arguments.get<std::string>() : python_json_dumps(tc.arguments);
        s += "}\n</tool_call>";
      }
      s += "<|im_end|>\n";
    } else if (m.role == "tool") {
      // Consecutive tool results share one user turn.
      if (i == 0 || msgs[i - 1].role != "tool") s += "<|im_start|>user";
      s += "\n<tool_response>\n";
      verbatim(i, m.content);
      s += "\n</tool_response>";
      if (i + 1 == n || msgs[i + 1].role != "tool") s += "<|im_end|>\n";
    }
    out.messages[i] = {begin, s.size()};
  }

  add_generation_prompt(out, opts);
  return out;
}

std::string QwenChatFormat::generation_prompt(std::optional<bool> enable_thinking) const {
  std::string g = kAssistantHeader;
  if (thinking_off(enable_thinking)) g += kNoThinking;
  return g;
}

std::unique_ptr<ToolCallStreamParser> QwenChatFormat::tool_call_parser(const nlohmann::ordered_json& tools,
                                                                       bool starts_in_reasoning) const {
  return std::make_unique<ToolCallStreamParser>(json_tool_call_body_parser(tools), starts_in_reasoning);
}

}  // namespace hypic
