// What the Qwen chat families share: ChatML turns (<|im_start|>role ... <|im_end|>), the same stop
// tokens, the same structural tags (tools, tool calls, tool responses, reasoning) and the same rule
// for earlier turns (reasoning dropped before the last user query). Each family adds its rendering
// and its tool-call body.
#pragma once
#include <string>
#include <vector>

#include "runtime/text/chat_format.h"

namespace hypic {

class ChatmlFormat : public ChatFormat {
 public:
  std::string end_of_turn() const override;
  std::vector<std::string> stop_tokens() const override;
  std::vector<std::string> reserved_markers() const override;
  HistoryRule history_rule() const override;

 protected:
  static constexpr const char* kAssistantHeader = "<|im_start|>assistant\n";
  // What `enable_thinking: false` appends to the generation prompt: an empty, closed reasoning section.
  static constexpr const char* kNoThinking = "<think>\n\n</think>\n\n";
  static bool thinking_off(std::optional<bool> enable_thinking) { return enable_thinking.has_value() && !*enable_thinking; }
  // Appends the generation prompt (when asked for) and records its span.
  void add_generation_prompt(RenderedChat& out, const RenderOptions& opts) const;
};

}  // namespace hypic
