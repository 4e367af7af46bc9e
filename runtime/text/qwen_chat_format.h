// The Qwen3 chat format (ChatML with <tool_call> JSON blocks, <tool_response> turns and <think>
// reasoning), rendered natively: byte-identical to the model's Jinja chat_template.
#pragma once
#include <string>

#include "runtime/text/chat_format.h"

namespace hypic {

class QwenChatFormat : public ChatFormat {
 public:
  static constexpr const char* kName = "qwen3";
  // True for Qwen3-style templates (Qwen3, Qwen3-Next): ChatML, JSON tool calls, <think> handling.
  static bool matches(const std::string& chat_template);

  std::string name() const override { return kName; }
  RenderedChat render(const Conversation& conv, const RenderOptions& opts) const override;
};

}  // namespace hypic
