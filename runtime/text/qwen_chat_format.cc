#include "runtime/text/qwen_chat_format.h"

#include "runtime/error.h"
#include "runtime/text/python_json.h"

namespace hypic {

namespace {

bool starts_with(const std::string& s, const std::string& p) { return s.compare(0, p.size(), p) == 0; }
bool ends_with(const std::string& s, const std::string& p) {
  return s.size() >= p.size() && s.compare(s.size() - p.size(), p.size(), p) == 0;
}
// Python str.lstrip('\n') / rstrip('\n') / strip('\n').
std::string lstrip_nl(const std::string& s) {
  const size_t b = s.find_first_not_of('\n');
  return b == std::string::npos ? std::string() : s.substr(b);
}
std::string rstrip_nl(const std::string& s) {
  const size_t e = s.find_last_not_of('\n');
  return e == std::string::npos ? std::string() : s.substr(0, e + 1);
}
std::string strip_nl(const std::string& s) { return lstrip_nl(rstrip_nl(s)); }
// Python s.split(sep)[0] and s.split(sep)[-1].
std::string before_first(const std::string& s, const std::string& sep) {
  const size_t p = s.find(sep);
  return p == std::string::npos ? s : s.substr(0, p);
}
std::string after_last(const std::string& s, const std::string& sep) {
  const size_t p = s.rfind(sep);
  return p == std::string::npos ? s : s.substr(p + sep.size());
}

const char* kToolsIntro =
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>";
const char* kToolsOutro =
    "\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
    "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": "
    "<args-json-object>}\n</tool_call><|im_end|>\n";

}  // namespace

bool QwenChatFormat::matches(const std::string& t) {
  // Fragments that identify the Qwen3 template family; "<function=" marks Qwen3.5's XML-style calls,
  // a different format.
  for (const char* frag : {"<|im_start|>", "<tool_call>", "<tool_response>", "</think>", "reasoning_content",
                           "\"arguments\": ", "multi_step_tool"})
    if (t.find(frag) == std::string::npos) return false;
  return t.find("<function=") == std::string::npos;
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
  std::string& s = out.text;
  const bool first_is_system = n > 0 && msgs[0].role == "system";

  // Header: the system turn, with the tools section when tools are given.
  const bool has_tools = conv.tools.is_array() && !conv.tools.empty();
  if (has_tools) {
    s += "<|im_start|>system\n";
    if (first_is_system) s += msgs[0].content + "\n\n";
    s += kToolsIntro;
    for (const auto& tool : conv.tools) s += "\n" + python_json_dumps(tool);
    s += kToolsOutro;
  } else if (first_is_system) {
    s += "<|im_start|>system\n" + msgs[0].content + "<|im_end|>\n";
  }
  if (first_is_system)
    out.messages[0] = {0, s.size()};
  else
    out.preamble = {0, s.size()};

  // The last real user query: reasoning is only shown for assistant turns after it. User turns that
  // merely carry tool responses do not count.
  size_t last_query = n - 1;  // wraps for n == 0; unused then
  for (size_t k = n; k-- > 0;) {
    const ChatMessage& m = msgs[k];
    if (m.role == "user" && !(starts_with(m.content, "<tool_response>") && ends_with(m.content, "</tool_response>"))) {
      last_query = k;
      break;
    }
  }

  for (size_t i = 0; i < n; ++i) {
    const ChatMessage& m = msgs[i];
    const size_t begin = s.size();
    if (m.role == "user" || (m.role == "system" && i != 0)) {
      s += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
    } else if (m.role == "assistant") {
      std::string content = m.content;
      std::string reasoning;
      if (m.reasoning_content) {
        reasoning = *m.reasoning_content;
      } else if (m.content.find("</think>") != std::string::npos) {
        content = lstrip_nl(after_last(m.content, "</think>"));
        reasoning = lstrip_nl(after_last(rstrip_nl(before_first(m.content, "</think>")), "<think>"));
      }
      const bool after_query = i > last_query;
      if (after_query && (i + 1 == n || !reasoning.empty()))
        s += "<|im_start|>assistant\n<think>\n" + strip_nl(reasoning) + "\n</think>\n\n" + lstrip_nl(content);
      else
        s += "<|im_start|>assistant\n" + content;
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
      s += "\n<tool_response>\n" + m.content + "\n</tool_response>";
      if (i + 1 == n || msgs[i + 1].role != "tool") s += "<|im_end|>\n";
    }
    if (!(i == 0 && first_is_system)) out.messages[i] = {begin, s.size()};
  }

  const size_t gen_begin = s.size();
  if (opts.add_generation_prompt) {
    s += "<|im_start|>assistant\n";
    if (opts.enable_thinking.has_value() && !*opts.enable_thinking) s += "<think>\n\n</think>\n\n";
  }
  out.generation_prompt = {gen_begin, s.size()};
  return out;
}

}  // namespace hypic
