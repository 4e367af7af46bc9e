// The Qwen3.5 chat format: ChatML turns, tool docs as JSON lines inside <tools> (before the system
// text), tool calls in XML style —
//   <tool_call>\n<function=NAME>\n<parameter=KEY>\nVALUE\n</parameter>\n</function>\n</tool_call>
// — tool results as <tool_response> blocks in a user turn, every message's text trimmed, and <think>
// reasoning shown for every assistant turn after the last user query (and dropped before it).
// Rendered natively, byte-identical to the model's Jinja chat_template.
#pragma once
#include <string>

#include "runtime/text/chatml_format.h"

namespace hypic {

class Qwen35ChatFormat : public ChatmlFormat {
 public:
  static constexpr const char* kName = "qwen3.5";
  // True for Qwen3.5-style templates: ChatML with <function=...>/<parameter=...> tool calls.
  static bool matches(const std::string& chat_template);

  std::string name() const override { return kName; }
  RenderedChat render(const Conversation& conv, const RenderOptions& opts) const override;
  std::string generation_prompt(std::optional<bool> enable_thinking) const override;
  bool generation_starts_in_reasoning(std::optional<bool> enable_thinking) const override;
  std::vector<std::string> reserved_markers() const override;
  std::unique_ptr<ToolCallStreamParser> tool_call_parser(const nlohmann::ordered_json& tools,
                                                         bool starts_in_reasoning) const override;
};

}  // namespace hypic
