// Model output -> the streaming reply parser of both tool-call formats (Qwen3 JSON bodies, Qwen3.5 XML
// bodies with schema-typed parameters), fed in pieces whose size the first byte picks. Never throws;
// every call's arguments is an object and every reported range lies inside the reply.
#include <algorithm>
#include <vector>

#include "runtime/text/tool_call_parser.h"
#include "runtime/text/xml_tool_call_parser.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

const nlohmann::ordered_json& tools() {
  static const nlohmann::ordered_json t = nlohmann::ordered_json::parse(R"([
    {"type": "function", "function": {"name": "add", "parameters": {"type": "object", "properties": {
      "a": {"type": "integer"}, "b": {"type": "number"}, "flag": {"type": "boolean"}}}}},
    {"type": "function", "function": {"name": "echo", "parameters": {"type": "object", "properties": {
      "s": {"type": "string"}, "o": {"type": "object"}, "l": {"type": "array"}}}}}])");
  return t;
}

void check(std::unique_ptr<hypic::ToolCallBodyParser> body, bool in_reasoning, std::string_view text, size_t step) {
  hypic::ToolCallStreamParser p(std::move(body), in_reasoning);
  std::vector<hypic::ReplyEvent> events;
  for (size_t at = 0; at < text.size(); at += step) p.push(text.substr(at, std::min(step, text.size() - at)), events);
  p.finish(events);
  for (const auto& e : events) {
    if (e.kind == hypic::ReplyEvent::Kind::kToolCall &&
        (!e.call.arguments.is_object() || e.call.begin > e.call.end || e.call.end > text.size()))
      __builtin_trap();
    if (e.kind == hypic::ReplyEvent::Kind::kError && (e.error.begin > e.error.end || e.error.end > text.size()))
      __builtin_trap();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const size_t step = data[0] % 17 + 1;
  const std::string_view text = hypic::fuzz::as_text(data + 1, size - 1);
  check(hypic::json_tool_call_body_parser(tools()), (data[0] & 0x80) != 0, text, step);
  check(hypic::xml_tool_call_body_parser(tools()), (data[0] & 0x80) != 0, text, step);
  return 0;
}
