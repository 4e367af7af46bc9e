// The Qwen3 chat template (ChatML with <tools>/<tool_call>/<tool_response> and <think>), transcribed
// from the template in tokenizer_config.json so that a plan renders without loading a model.
#pragma once
#include "dsl/chat_framer.h"

namespace hypic::dsl {

class QwenChatFramer : public ChatFramer {
 public:
  std::string name() const override { return "qwen3"; }
  FramedConversation frame(const std::vector<FrameMessage>& messages, const Json& tools) const override;
  std::string generation_prompt(std::optional<bool> thinking) const override;
  std::vector<std::string> reserved_markers() const override;
};

}  // namespace hypic::dsl
