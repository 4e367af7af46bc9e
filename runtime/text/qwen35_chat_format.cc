#include "runtime/text/qwen35_chat_format.h"

#include "runtime/error.h"
#include "runtime/text/python_json.h"
#include "runtime/text/python_string.h"
#include "runtime/text/xml_tool_call_parser.h"

namespace hypic {

namespace {

constexpr const char* kToolsIntro = "# Tools\n\nYou have access to the following functions:\n\n<tools>";
constexpr const char* kToolsOutro =
    "\n</tools>\n\nIf you choose to call a function ONLY reply in the following format with NO suffix:\n\n"
    "<tool_call>\n<function=example_function_name>\n<parameter=example_parameter_1>\nvalue_1\n</parameter>\n"
    "<parameter=example_parameter_2>\nThis is the value for the second parameter\nthat can span\nmultiple lines\n"
    "</parameter>\n</function>\n</tool_call>\n\n<IMPORTANT>\nReminder:\n"
    "- Function calls MUST follow the specified format: an inner <function=...></function> block must be nested "
    "within <tool_call></tool_call> XML tags\n"
    "- Required parameters MUST be specified\n"
    "- You may provide optional reasoning for your function call in natural language BEFORE the function call, but "
    "NOT after\n"
    "- If there is no function call available, answer the question like normal with your current knowledge and do "
    "not tell the user about function calls\n</IMPORTANT>";

// The arguments as the template iterates them (`arguments|items`): an object, or the object a JSON
// string holds (OpenAI's wire form; the template itself cannot iterate a string).
nlohmann::ordered_json argument_object(const ToolCall& tc, size_t msg, size_t k) {
  const std::string where = "messages[" + std::to_string(msg) + "].tool_calls[" + std::to_string(k) + "]";
  if (tc.arguments.is_object()) return tc.arguments;
  if (tc.arguments.is_string()) {
    nlohmann::ordered_json j;
    if (parse_bounded_json(tc.arguments.get_ref<const std::string&>(), &j) && j.is_object()) return j;
    throw InvalidArgument(where + ".arguments: the qwen3.5 chat format writes arguments one parameter each, so "
                                  "they must be a JSON object (or a string holding one)");
  }
  if (tc.arguments.is_null()) return nlohmann::ordered_json::object();
  throw InvalidArgument(where + ".arguments must be a JSON object");
}

}  // namespace

bool Qwen35ChatFormat::matches(const std::string& t) {
  for (const char* frag : {"<|im_start|>", "<tool_call>", "<function=", "<parameter=", "<tool_response>", "</think>",
                           "last_query_index"})
    if (t.find(frag) == std::string::npos) return false;
  return true;
}

RenderedChat Qwen35ChatFormat::render(const Conversation& conv, const RenderOptions& opts) const {
  const auto& msgs = conv.messages;
  const size_t n = msgs.size();
  if (n == 0) throw InvalidArgument("the qwen3.5 chat format needs at least one message");
  for (size_t i = 0; i < n; ++i) {
    const std::string& r = msgs[i].role;
    if (r != "system" && r != "user" && r != "assistant" && r != "tool")
      throw InvalidArgument("messages[" + std::to_string(i) + "]: role \"" + r +
                            "\" is not one the qwen3.5 chat format renders (system, user, assistant, tool)");
    if (r == "system" && i != 0)
      throw InvalidArgument("messages[" + std::to_string(i) +
                            "]: the qwen3.5 chat format allows a system message only at the beginning");
  }
  RenderedChat out;
  out.messages.assign(n, TextSpan{});
  out.content.assign(n, ContentPlacement{});
  std::string& s = out.text;
  const bool first_is_system = msgs[0].role == "system";
  // Every message's text is trimmed (Python str.strip); where it lands is recorded for cutting blocks.
  auto trimmed = [&](size_t i) {
    size_t skipped = 0;
    std::string t = python_strip(msgs[i].content, &skipped);
    return std::pair<std::string, size_t>(std::move(t), skipped);
  };
  auto place = [&](size_t i, const std::string& text, size_t skipped) {
    out.content[i] = {s.size(), skipped, text.size()};
    s += text;
  };

  // Header: the tool docs first, then the system text, in one system turn.
  const bool has_tools = conv.tools.is_array() && !conv.tools.empty();
  if (has_tools) {
    s += "<|im_start|>system\n";
    s += kToolsIntro;
    for (const auto& tool : conv.tools) s += "\n" + python_json_dumps(tool);
    s += kToolsOutro;
    if (first_is_system) {
      out.tools = TextSpan{0, s.size()};
      const size_t begin = s.size();
      auto [text, skipped] = trimmed(0);
      if (!text.empty()) {
        s += "\n\n";
        place(0, text, skipped);
      } else {
        out.content[0] = {s.size(), skipped, 0};
      }
      s += "<|im_end|>\n";
      out.messages[0] = {begin, s.size()};
    } else {
      s += "<|im_end|>\n";
      out.tools = TextSpan{0, s.size()};
    }
  } else if (first_is_system) {
    s += "<|im_start|>system\n";
    auto [text, skipped] = trimmed(0);
    place(0, text, skipped);
    s += "<|im_end|>\n";
    out.messages[0] = {0, s.size()};
  }

  // The last real user query: assistant turns after it show their reasoning, earlier ones drop it.
  std::optional<size_t> last_query;
  for (size_t k = n; k-- > 0;) {
    if (msgs[k].role != "user") continue;
    const std::string c = python_strip(msgs[k].content);
    if (!(starts_with(c, "<tool_response>") && ends_with(c, "</tool_response>"))) {
      last_query = k;
      break;
    }
  }
  if (!last_query)
    throw InvalidArgument("the qwen3.5 chat format needs a user message that is not only a tool response "
                          "(its template raises 'No user query found in messages.')");

  for (size_t i = 0; i < n; ++i) {
    const ChatMessage& m = msgs[i];
    if (i == 0 && first_is_system) continue;
    const size_t begin = s.size();
    auto [content, skipped] = trimmed(i);
    if (m.role == "user") {
      s += "<|im_start|>user\n";
      place(i, content, skipped);
      s += "<|im_end|>\n";
    } else if (m.role == "assistant") {
      std::string reasoning;
      bool rewritten = false;
      if (m.reasoning_content) {
        reasoning = *m.reasoning_content;
      } else if (content.find("</think>") != std::string::npos) {
        reasoning = lstrip_newlines(split_last(rstrip_newlines(split_first(content, "</think>")), "<think>"));
        content = lstrip_newlines(split_last(content, "</think>"));
        rewritten = true;
      }
      reasoning = python_strip(reasoning);
      s += "<|im_start|>assistant\n";
      if (i > *last_query) s += "<think>\n" + reasoning + "\n</think>\n\n";
      if (rewritten) s += content;
      else place(i, content, skipped);
      for (size_t k = 0; k < m.tool_calls.size(); ++k) {
        const ToolCall& tc = m.tool_calls[k];
        if (k == 0) s += python_strip(content).empty() ? "" : "\n\n";
        else s += "\n";
        s += "<tool_call>\n<function=" + tc.name + ">\n";
        const nlohmann::ordered_json args = argument_object(tc, i, k);
        for (const auto& [key, value] : args.items()) {
          s += "<parameter=" + key + ">\n";
          s += value.is_object() || value.is_array() ? python_json_dumps(value) : python_str(value);
          s += "\n</parameter>\n";
        }
        s += "</function>\n</tool_call>";
      }
      s += "<|im_end|>\n";
    } else if (m.role == "tool") {
      // Consecutive tool results share one user turn (the template opens it after a non-tool message).
      if (i > 0 && msgs[i - 1].role != "tool") s += "<|im_start|>user";
      s += "\n<tool_response>\n";
      place(i, content, skipped);
      s += "\n</tool_response>";
      if (i + 1 == n || msgs[i + 1].role != "tool") s += "<|im_end|>\n";
    }
    out.messages[i] = {begin, s.size()};
  }

  add_generation_prompt(out, opts);
  return out;
}

std::string Qwen35ChatFormat::generation_prompt(std::optional<bool> enable_thinking) const {
  return std::string(kAssistantHeader) + (thinking_off(enable_thinking) ? kNoThinking : "<think>\n");
}

bool Qwen35ChatFormat::generation_starts_in_reasoning(std::optional<bool> enable_thinking) const {
  return !thinking_off(enable_thinking);
}

std::vector<std::string> Qwen35ChatFormat::reserved_markers() const {
  // Its tool-call tags as well: a value could otherwise forge a parameter of an earlier call.
  std::vector<std::string> m = ChatmlFormat::reserved_markers();
  for (const char* tag : {"<function=", "</function>", "<parameter=", "</parameter>"}) m.push_back(tag);
  return m;
}

std::unique_ptr<ToolCallStreamParser> Qwen35ChatFormat::tool_call_parser(const nlohmann::ordered_json& tools,
                                                                         bool starts_in_reasoning) const {
  return std::make_unique<ToolCallStreamParser>(xml_tool_call_body_parser(tools), starts_in_reasoning);
}

}  // namespace hypic
