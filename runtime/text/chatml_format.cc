#include "runtime/text/chatml_format.h"

namespace hypic {

std::string ChatmlFormat::end_of_turn() const { return "<|im_end|>"; }

std::vector<std::string> ChatmlFormat::stop_tokens() const { return {"<|im_end|>", "<|endoftext|>"}; }

std::vector<std::string> ChatmlFormat::reserved_markers() const {
  return {"<|im_start|>", "<|im_end|>",  "<|endoftext|>", "<tool_call>", "</tool_call>", "<tool_response>",
          "</tool_response>", "<tools>", "</tools>", "<think>", "</think>"};
}

HistoryRule ChatmlFormat::history_rule() const { return {true, kAssistantHeader}; }

}  // namespace hypic
