#include "runtime/text/tool_call_parser.h"

#include <algorithm>

namespace hypic {

namespace {

constexpr std::string_view kOpen = "<tool_call>";
constexpr std::string_view kClose = "</tool_call>";
constexpr int kMaxDepth = 256;

std::string_view trim(std::string_view s) {
  const size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string_view::npos) return {};
  const size_t e = s.find_last_not_of(" \t\r\n");
  return s.substr(b, e - b + 1);
}

// Deepest [/{ nesting outside strings: refuses pathological input before the JSON parser sees it.
int nesting_depth(std::string_view s) {
  int depth = 0, max_depth = 0;
  bool in_str = false, esc = false;
  for (char c : s) {
    if (in_str) {
      if (esc)
        esc = false;
      else if (c == '\\')
        esc = true;
      else if (c == '"')
        in_str = false;
      continue;
    }
    if (c == '"') in_str = true;
    else if (c == '[' || c == '{') max_depth = std::max(max_depth, ++depth);
    else if (c == ']' || c == '}') --depth;
  }
  return max_depth;
}

bool parse_json(std::string_view s, nlohmann::ordered_json* out) {
  if (nesting_depth(s) > kMaxDepth) return false;
  *out = nlohmann::ordered_json::parse(s.begin(), s.end(), nullptr, /*allow_exceptions=*/false);
  return !out->is_discarded();
}

void parse_block(std::string_view body, size_t begin, size_t end, AssistantOutput& out) {
  auto fail = [&](ToolCallError::Kind k, std::string msg) {
    out.errors.push_back({k, std::move(msg), std::string(body), begin, end});
  };
  nlohmann::ordered_json j;
  if (!parse_json(trim(body), &j)) return fail(ToolCallError::Kind::kInvalidJson, "tool call is not valid JSON");
  if (!j.is_object()) return fail(ToolCallError::Kind::kBadShape, "tool call must be a JSON object");
  if (!j.contains("name") || !j["name"].is_string() || j["name"].get_ref<const std::string&>().empty())
    return fail(ToolCallError::Kind::kBadShape, "tool call has no \"name\" string");
  ParsedToolCall call{j["name"].get<std::string>(), nlohmann::ordered_json::object(), begin, end};
  if (j.contains("arguments") && !j["arguments"].is_null()) {
    const auto& a = j["arguments"];
    if (a.is_object()) {
      call.arguments = a;
    } else if (a.is_string()) {  // some models emit the arguments as a JSON-encoded string
      nlohmann::ordered_json inner;
      if (!parse_json(a.get_ref<const std::string&>(), &inner) || !inner.is_object())
        return fail(ToolCallError::Kind::kBadShape, "tool call \"arguments\" string is not a JSON object");
      call.arguments = std::move(inner);
    } else {
      return fail(ToolCallError::Kind::kBadShape, "tool call \"arguments\" must be an object");
    }
  }
  out.tool_calls.push_back(std::move(call));
}

}  // namespace

AssistantOutput parse_assistant_output(std::string_view text) {
  AssistantOutput out;
  // Reasoning: everything up to the first </think> (the opening <think> may sit in the prompt).
  const size_t think_end = text.find("</think>");
  if (think_end != std::string_view::npos) {
    std::string_view r = text.substr(0, think_end);
    const size_t open = r.find("<think>");
    if (open != std::string_view::npos) r.remove_prefix(open + 7);
    const size_t b = r.find_first_not_of('\n');
    const size_t e = r.find_last_not_of('\n');
    out.reasoning = b == std::string_view::npos ? std::string() : std::string(r.substr(b, e - b + 1));
    text.remove_prefix(think_end + 8);
  }
  const size_t base = think_end == std::string_view::npos ? 0 : think_end + 8;  // offsets refer to the input
  std::string content;
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t open = text.find(kOpen, pos);
    if (open == std::string_view::npos) break;
    content.append(text.substr(pos, open - pos));
    const size_t body_begin = open + kOpen.size();
    const size_t close = text.find(kClose, body_begin);
    if (close == std::string_view::npos) {
      out.errors.push_back({ToolCallError::Kind::kUnterminated, "<tool_call> is not closed by </tool_call>",
                            std::string(text.substr(body_begin)), base + open, base + text.size()});
      pos = text.size();
      break;
    }
    parse_block(text.substr(body_begin, close - body_begin), base + open, base + close + kClose.size(), out);
    pos = close + kClose.size();
  }
  if (pos < text.size()) content.append(text.substr(pos));
  out.content = std::string(trim(content));
  return out;
}

}  // namespace hypic
