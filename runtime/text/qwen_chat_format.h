// The Qwen3 chat format (Qwen3, Qwen3-Next): ChatML turns, tool docs as JSON lines inside <tools>,
// tool calls as <tool_call>{"name": ..., "arguments": {...}}</tool_call>, tool results as
// <tool_response> blocks in a user turn, <think> reasoning shown only after the last user query.
// Rendered natively, byte-identical to the model's Jinja chat_template.
#pragma once
#include <string>

#include "runtime/text/chatml_format.h"

namespace hypic {

class QwenChatFormat : public ChatmlFormat {
 public:
  static constexpr const char* kName = "qwen3";
  // True for Qwen3-style templates: ChatML, JSON tool calls, <think> handling.
  static bool matches(const std::string& chat_template);

  std::string name() const override { return kName; }
  RenderedChat render(const Conversation& conv, const RenderOptions& opts) const override;
  std::string generation_prompt(std::optional<bool> enable_thinking) const override;
  bool generation_starts_in_reasoning(std::optional<bool>) const override { return false; }
  std::unique_ptr<ToolCallStreamParser> tool_call_parser(const nlohmann::ordered_json& tools,
                                                         bool starts_in_reasoning) const override;
};

}  // namespace hypic
