// A compiled prompt: ordered blocks, each one cache segment. Concatenating the blocks' `text` gives
// exactly the model's chat template over the same conversation; `generation_prompt` follows it.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "dsl/template.h"
#include "runtime/segment_key.h"

namespace hypic::dsl {

struct PlanBlock {
  std::string id;     // declared id; repeated blocks: "<id>.<element key>", history: "<id>.<index>"
  std::string group;  // the declared block it came from
  std::string role;   // role of the chat message it belongs to
  std::string kind;   // text | tools | history
  std::string text;     // the framed bytes this block contributes (what is tokenized and cached)
  std::string content;  // the message content (or part of it) this block supplied
  int message = -1;     // index of its chat message; -1 for tool docs
  CachePolicy cache = CachePolicy::kCache;
  BlockOrder order = BlockOrder::kFixed;
  bool is_volatile = false;
  std::string volatile_reason;
  SourceLocation loc;
  std::optional<std::vector<int>> tokens;  // set when a tokenizer was given
  std::optional<SegmentKey> content_key;
  std::optional<SegmentKey> chain_key;
};

struct LintFinding {
  std::string level;  // warning | info
  std::string code;   // volatile-before-stable | reusable-prefix | ...
  std::string block;
  SourceLocation loc;
  std::string message;
};

struct PromptPlan {
  std::string name;
  std::string chat_format;
  std::vector<PlanBlock> blocks;
  std::string generation_prompt;
  Json tools = Json::array();  // OpenAI-style tool declarations, in the order the tools block lists them
  AgentSettings agent;
  std::vector<LintFinding> lint;
  size_t reusable_prefix_blocks = 0;
  std::optional<size_t> reusable_prefix_tokens;

  std::string text() const;  // all blocks' text, in order
  Json to_json() const;
};

// Tokenizes every block on its own and fills tokens, content keys and chain keys.
class PlanTokenizer;
void assign_tokens_and_keys(PromptPlan& plan, const PlanTokenizer& tokenizer, const KeyContext& ctx);

}  // namespace hypic::dsl
