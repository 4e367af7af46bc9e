#include "runtime/text/chatml_format.h"

namespace hypic {

std::string ChatmlFormat::end_of_turn() const { return "<|im_end|>"; }

std::vector<std::string> ChatmlFormat::stop_tokens() const { return {"<|im_end|>", "<|endoftext|>"}; }

std::vector<std::string> ChatmlFormat::reserved_markers() const {
  return {"<|im_start|>", "<|im_end|>",  "<|endoftext|>", "<tool_call>", "</tool_call>", "<tool_response>",
          "</tool_response>", "<tools>", "</tools>", "<think>", "</think>"};
}

HistoryRule ChatmlFormat::history_rule() const { return {true, kAssistantHeader}; }

void ChatmlFormat::add_generation_prompt(RenderedChat& out, const RenderOptions& opts) const {
  const size_t begin = out.text.size();
  if (opts.add_generation_prompt) out.text += generation_prompt(opts.enable_thinking);
  out.generation_prompt = {begin, out.text.size()};
}

}  // namespace hypic
