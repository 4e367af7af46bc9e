// Model output -> reasoning, content, tool calls, errors. Never throws; every call's arguments is an
// object and every reported range lies inside the text.
#include "runtime/text/tool_call_parser.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text = hypic::fuzz::as_text(data, size);
  const hypic::AssistantOutput out = hypic::parse_assistant_output(text);
  for (const auto& c : out.tool_calls)
    if (!c.arguments.is_object() || c.begin > c.end || c.end > text.size()) __builtin_trap();
  for (const auto& e : out.errors)
    if (e.begin > e.end || e.end > text.size()) __builtin_trap();
  return 0;
}
