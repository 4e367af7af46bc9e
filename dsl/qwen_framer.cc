#include "dsl/qwen_framer.h"

#include "runtime/text/python_json.h"
#include "runtime/error.h"

namespace hypic::dsl {
namespace {

bool starts_with(const std::string& s, const std::string& p) { return s.rfind(p, 0) == 0; }
bool ends_with(const std::string& s, const std::string& p) {
  return s.size() >= p.size() && s.compare(s.size() - p.size(), p.size(), p) == 0;
}
std::string lstrip_nl(std::string s) {
  s.erase(0, s.find_first_not_of('\n') == std::string::npos ? s.size() : s.find_first_not_of('\n'));
  return s;
}
std::string rstrip_nl(std::string s) {
  while (!s.empty() && s.back() == '\n') s.pop_back();
  return s;
}

// Python's str.split(sep): all pieces.
std::vector<std::string> split(const std::string& s, const std::string& sep) {
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    const size_t at = s.find(sep, start);
    if (at == std::string::npos) {
      out.push_back(s.substr(start));
      return out;
    }
    out.push_back(s.substr(start, at - start));
    start = at + sep.size();
  }
}

}  // namespace

FramedConversation QwenChatFramer::frame(const std::vector<FrameMessage>& m, const Json& tools) const {
  FramedConversation f;
  f.messages.assign(m.size(), ByteSpan{});
  f.content_at.assign(m.size(), std::string::npos);
  std::string& out = f.text;
  const bool has_tools = tools.is_array() && !tools.empty();
  const bool first_system = !m.empty() && m[0].role == "system";

  if (has_tools) {
    out += "<|im_start|>system\n";
    if (first_system) {
      f.content_at[0] = out.size();
      out += m[0].content + "\n\n";
      f.messages[0] = {0, out.size()};
    }
    const size_t tools_begin = out.size();
    out += "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
           "You are provided with function signatures within <tools></tools> XML tags:\n<tools>";
    for (const auto& t : tools) out += "\n" + python_json_dumps(t);
    out += "\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
           "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": "
           "<args-json-object>}\n</tool_call><|im_end|>\n";
    // Without a system message the whole tools message is the tool docs.
    f.tools = ByteSpan{first_system ? tools_begin : 0, out.size()};
  } else if (first_system) {
    out += "<|im_start|>system\n";
    f.content_at[0] = out.size();
    out += m[0].content + "<|im_end|>\n";
    f.messages[0] = {0, out.size()};
  }

  // The last real user query: assistant turns after it keep their reasoning.
  size_t last_query = m.empty() ? 0 : m.size() - 1;
  for (size_t k = m.size(); k-- > 0;) {
    const auto& msg = m[k];
    if (msg.role == "user" && !(starts_with(msg.content, "<tool_response>") && ends_with(msg.content, "</tool_response>"))) {
      last_query = k;
      break;
    }
  }

  for (size_t i = 0; i < m.size(); ++i) {
    const FrameMessage& msg = m[i];
    const size_t begin = out.size();
    if (msg.role == "user" || (msg.role == "system" && i != 0)) {
      out += "<|im_start|>" + msg.role + "\n";
      f.content_at[i] = out.size();
      out += msg.content + "<|im_end|>\n";
    } else if (msg.role == "system") {
      continue;  // the first system message is rendered above
    } else if (msg.role == "assistant") {
      std::string content = msg.content;
      std::string reasoning;
      if (msg.reasoning_content) {
        reasoning = *msg.reasoning_content;
      } else if (content.find("</think>") != std::string::npos) {
        content = lstrip_nl(split(msg.content, "</think>").back());
        reasoning = lstrip_nl(split(rstrip_nl(split(msg.content, "</think>").front()), "<think>").back());
      }
      const bool is_last = i + 1 == m.size();
      if (i > last_query && (is_last || !reasoning.empty())) {
        std::string r = reasoning;
        r = rstrip_nl(lstrip_nl(r));
        out += "<|im_start|>assistant\n<think>\n" + r + "\n</think>\n\n" + lstrip_nl(content);
      } else {
        out += "<|im_start|>assistant\n" + content;
      }
      if (msg.tool_calls.is_array()) {
        for (size_t k = 0; k < msg.tool_calls.size(); ++k) {
          if ((k == 0 && !content.empty()) || k > 0) out += "\n";
          Json tc = msg.tool_calls[k];
          if (tc.contains("function")) tc = tc["function"];
          HYPIC_ASSERT(tc.contains("name") && tc["name"].is_string(), "tool call without a name reached the framer");
          out += "<tool_call>\n{\"name\": \"" + tc["name"].get<std::string>() + "\", \"arguments\": ";
          const Json args = tc.contains("arguments") ? tc["arguments"] : Json::object();
          out += args.is_string() ? args.get<std::string>() : python_json_dumps(args);
          out += "}\n</tool_call>";
        }
      }
      out += "<|im_end|>\n";
    } else if (msg.role == "tool") {
      if (i == 0 || m[i - 1].role != "tool") out += "<|im_start|>user";
      out += "\n<tool_response>\n";
      f.content_at[i] = out.size();
      out += msg.content + "\n</tool_response>";
      if (i + 1 == m.size() || m[i + 1].role != "tool") out += "<|im_end|>\n";
    } else {
      HYPIC_ASSERT(false, "role '" + msg.role + "' reached the framer");
    }
    f.messages[i] = {begin, out.size()};
  }
  return f;
}

std::string QwenChatFramer::generation_prompt(std::optional<bool> thinking) const {
  std::string g = "<|im_start|>assistant\n";
  if (thinking && !*thinking) g += "<think>\n\n</think>\n\n";
  return g;
}

std::vector<std::string> QwenChatFramer::reserved_markers() const {
  // <|...|> tokens and the structural tags are matched by find_chat_markup itself.
  return {};
}

}  // namespace hypic::dsl
