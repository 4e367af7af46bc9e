#include "runtime/text/tool_call_parser.h"

#include <algorithm>

namespace hypic {

namespace {

constexpr std::string_view kThinkOpen = "<think>";
constexpr std::string_view kThinkClose = "</think>";
constexpr std::string_view kCallOpen = "<tool_call>";
constexpr std::string_view kCallClose = "</tool_call>";
constexpr int kMaxDepth = 256;

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

std::string_view trim(std::string_view s) {
  const size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string_view::npos) return {};
  const size_t e = s.find_last_not_of(" \t\r\n");
  return s.substr(b, e - b + 1);
}

// Length of the longest suffix of `s` that is a proper prefix of `tag` (text that may still become it).
size_t partial_tag_suffix(std::string_view s, std::string_view tag) {
  for (size_t k = std::min(s.size(), tag.size() - 1); k > 0; --k)
    if (s.compare(s.size() - k, k, tag, 0, k) == 0) return k;
  return 0;
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

ReplyEvent error_event(ToolCallError::Kind k, std::string msg, std::string_view body) {
  ReplyEvent e{ReplyEvent::Kind::kError, {}, {}, {k, std::move(msg), std::string(body)}};
  return e;
}

class JsonBodyParser : public ToolCallBodyParser {
 public:
  explicit JsonBodyParser(nlohmann::ordered_json tools) : tools_(std::move(tools)) {}

  ReplyEvent parse(std::string_view body) const override {
    using K = ToolCallError::Kind;
    nlohmann::ordered_json j;
    if (!parse_bounded_json(trim(body), &j)) return error_event(K::kInvalidJson, "tool call is not valid JSON", body);
    if (!j.is_object()) return error_event(K::kBadShape, "tool call must be a JSON object", body);
    if (!j.contains("name") || !j["name"].is_string() || j["name"].get_ref<const std::string&>().empty())
      return error_event(K::kBadShape, "tool call has no \"name\" string", body);
    ReplyEvent ev{ReplyEvent::Kind::kToolCall, {}, {j["name"].get<std::string>(), nlohmann::ordered_json::object()}, {}};
    if (!tools_.empty() && !find_tool(tools_, ev.call.name)) {
      ev.kind = ReplyEvent::Kind::kError;
      ev.error = unknown_tool_error(tools_, ev.call.name, body);
      return ev;
    }
    if (j.contains("arguments") && !j["arguments"].is_null()) {
      const auto& a = j["arguments"];
      if (a.is_object()) {
        ev.call.arguments = a;
      } else if (a.is_string()) {  // some models emit the arguments as a JSON-encoded string
        nlohmann::ordered_json inner;
        if (!parse_bounded_json(a.get_ref<const std::string&>(), &inner) || !inner.is_object())
          return error_event(K::kBadShape, "tool call \"arguments\" string is not a JSON object", body);
        ev.call.arguments = std::move(inner);
      } else {
        return error_event(K::kBadShape, "tool call \"arguments\" must be an object", body);
      }
    }
    return ev;
  }

 private:
  nlohmann::ordered_json tools_;
};

}  // namespace

bool parse_bounded_json(std::string_view s, nlohmann::ordered_json* out) {
  if (nesting_depth(s) > kMaxDepth) return false;
  *out = nlohmann::ordered_json::parse(s.begin(), s.end(), nullptr, /*allow_exceptions=*/false);
  return !out->is_discarded();
}

const nlohmann::ordered_json* find_tool(const nlohmann::ordered_json& tools, const std::string& name) {
  if (!tools.is_array()) return nullptr;
  for (const auto& t : tools) {
    const auto& fn = t.is_object() && t.contains("function") ? t["function"] : t;
    if (fn.is_object() && fn.contains("name") && fn["name"].is_string() && fn["name"].get_ref<const std::string&>() == name)
      return &fn;
  }
  return nullptr;
}

ToolCallError unknown_tool_error(const nlohmann::ordered_json& tools, const std::string& name, std::string_view body) {
  std::string known;
  for (const auto& t : tools) {
    const auto& fn = t.is_object() && t.contains("function") ? t["function"] : t;
    if (fn.is_object() && fn.contains("name") && fn["name"].is_string())
      known += (known.empty() ? "" : ", ") + fn["name"].get<std::string>();
  }
  return {ToolCallError::Kind::kUnknownTool, "unknown tool '" + name + "' (tools: " + known + ")",
          std::string(body)};
}

std::unique_ptr<ToolCallBodyParser> json_tool_call_body_parser(const nlohmann::ordered_json& tools) {
  return std::make_unique<JsonBodyParser>(tools.is_array() ? tools : nlohmann::ordered_json::array());
}

ToolCallStreamParser::ToolCallStreamParser(std::unique_ptr<ToolCallBodyParser> body, bool starts_in_reasoning)
    : body_(std::move(body)), state_(starts_in_reasoning ? State::kReasoning : State::kStart) {}

void ToolCallStreamParser::push(std::string_view piece, std::vector<ReplyEvent>& out) {
  buf_.append(piece);
  drain(false, out);
}

void ToolCallStreamParser::finish(std::vector<ReplyEvent>& out) { drain(true, out); }

void ToolCallStreamParser::emit_text(ReplyEvent::Kind kind, std::string_view s, std::vector<ReplyEvent>& out) {
  if (s.empty()) return;
  // Consecutive pieces of one kind merge, so a caller sees few events.
  if (!out.empty() && out.back().kind == kind) {
    out.back().text.append(s);
    return;
  }
  ReplyEvent e{kind, std::string(s), {}, {}};
  out.push_back(std::move(e));
}

void ToolCallStreamParser::drain(bool final, std::vector<ReplyEvent>& out) {
  auto consume = [&](size_t n) {
    buf_.erase(0, n);
    buf_offset_ += n;
  };
  for (;;) {
    switch (state_) {
      case State::kStart: {
        // A reply may open with <think> (the model writes the tag itself): wait until that is decided.
        size_t b = 0;
        while (b < buf_.size() && is_space(buf_[b])) ++b;
        const std::string_view rest = std::string_view(buf_).substr(b);
        if (rest.compare(0, kThinkOpen.size(), kThinkOpen) == 0) {
          consume(b + kThinkOpen.size());
          state_ = State::kReasoning;
          continue;
        }
        if (!final && rest.size() < kThinkOpen.size() && kThinkOpen.compare(0, rest.size(), rest) == 0) return;
        state_ = State::kText;
        continue;
      }
      case State::kReasoning: {
        if (!reasoning_started_) {
          size_t b = 0;
          while (b < buf_.size() && buf_[b] == '\n') ++b;
          consume(b);
          if (buf_.empty()) return;
          reasoning_started_ = true;
        }
        const size_t close = buf_.find(kThinkClose);
        if (close != std::string::npos) {
          size_t e = close;
          while (e > 0 && buf_[e - 1] == '\n') --e;  // the reasoning's trailing newlines are not part of it
          emit_text(ReplyEvent::Kind::kReasoning, std::string_view(buf_).substr(0, e), out);
          consume(close + kThinkClose.size());
          state_ = State::kText;
          continue;
        }
        size_t e = buf_.size() - (final ? 0 : partial_tag_suffix(buf_, kThinkClose));
        while (e > 0 && buf_[e - 1] == '\n') --e;  // may be trailing: held until more reasoning follows
        emit_text(ReplyEvent::Kind::kReasoning, std::string_view(buf_).substr(0, e), out);
        consume(final ? buf_.size() : e);
        return;
      }
      case State::kText: {
        if (!text_started_) {
          size_t b = 0;
          while (b < buf_.size() && is_space(buf_[b])) ++b;
          consume(b);
          if (buf_.empty()) return;
        }
        const size_t open = buf_.find(kCallOpen);
        const size_t upto = open != std::string::npos ? open : buf_.size() - (final ? 0 : partial_tag_suffix(buf_, kCallOpen));
        if (upto > 0) {
          emit_text(ReplyEvent::Kind::kText, std::string_view(buf_).substr(0, upto), out);
          text_started_ = true;
        }
        consume(upto);
        if (open == std::string::npos) return;
        call_begin_ = buf_offset_;
        consume(kCallOpen.size());
        scanned_ = 0;
        state_ = State::kCall;
        continue;
      }
      case State::kCall: {
        const size_t from = scanned_ >= kCallClose.size() ? scanned_ - kCallClose.size() + 1 : 0;
        const size_t close = buf_.find(kCallClose, from);
        if (close == std::string::npos) {
          scanned_ = buf_.size();
          if (!final) return;
          ToolCallError err{ToolCallError::Kind::kUnterminated,
                            "<tool_call> is not closed by </tool_call> (the reply ended inside the call)", buf_,
                            call_begin_, buf_offset_ + buf_.size()};
          out.push_back(ReplyEvent{ReplyEvent::Kind::kError, {}, {}, std::move(err)});
          consume(buf_.size());
          state_ = State::kText;
          return;
        }
        ReplyEvent ev = body_->parse(std::string_view(buf_).substr(0, close));
        const size_t end = buf_offset_ + close + kCallClose.size();
        if (ev.kind == ReplyEvent::Kind::kToolCall) {
          ev.call.begin = call_begin_;
          ev.call.end = end;
        } else {
          ev.error.begin = call_begin_;
          ev.error.end = end;
        }
        out.push_back(std::move(ev));
        consume(close + kCallClose.size());
        state_ = State::kText;
        continue;
      }
    }
  }
}

AssistantOutput collect_reply(const std::vector<ReplyEvent>& events) {
  AssistantOutput r;
  std::string content;
  for (const auto& e : events) {
    switch (e.kind) {
      case ReplyEvent::Kind::kReasoning: r.reasoning += e.text; break;
      case ReplyEvent::Kind::kText: content += e.text; break;
      case ReplyEvent::Kind::kToolCall: r.tool_calls.push_back(e.call); break;
      case ReplyEvent::Kind::kError: r.errors.push_back(e.error); break;
    }
  }
  r.content = std::string(trim(content));
  return r;
}

}  // namespace hypic
