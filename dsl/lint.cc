#include "dsl/lint.h"

#include <array>
#include <string_view>

namespace hypic::dsl {

bool is_per_query_name(const std::string& name) {
  static constexpr std::array<std::string_view, 11> kNames = {
      "question", "query", "input", "user_input", "request", "timestamp", "time", "date", "now", "today", "datetime"};
  for (auto n : kNames)
    if (name == n) return true;
  return false;
}

void lint_plan(PromptPlan& plan) {
  plan.lint.clear();
  const auto& blocks = plan.blocks;
  size_t prefix = 0;
  while (prefix < blocks.size() && !blocks[prefix].is_volatile) ++prefix;
  plan.reusable_prefix_blocks = prefix;

  std::string last_group;
  for (size_t i = 0; i < blocks.size(); ++i) {
    const PlanBlock& v = blocks[i];
    if (!v.is_volatile || v.group == last_group) continue;  // one finding per declared block
    for (size_t j = i + 1; j < blocks.size(); ++j) {
      if (blocks[j].is_volatile) continue;
      size_t stable_after = 0;
      for (size_t k = j; k < blocks.size(); ++k) stable_after += !blocks[k].is_volatile;
      plan.lint.push_back(
          {"warning", "volatile-before-stable", v.group, v.loc,
           "block '" + v.id + "' is volatile (" + v.volatile_reason + ") and stands before stable block '" +
               blocks[j].id + "'; " + std::to_string(stable_after) +
               " stable block(s) after it cannot reuse the prefix cache - move it after them"});
      last_group = v.group;
      break;
    }
  }

  std::optional<size_t> tokens;
  size_t total_tokens = 0;
  bool have_tokens = !blocks.empty();
  for (const auto& b : blocks) have_tokens &= b.tokens.has_value();
  if (have_tokens) {
    size_t t = 0;
    for (size_t i = 0; i < blocks.size(); ++i) {
      if (i < prefix) t += blocks[i].tokens->size();
      total_tokens += blocks[i].tokens->size();
    }
    tokens = t;
  }
  plan.reusable_prefix_tokens = tokens;
  std::string msg = "reusable prefix: " + std::to_string(prefix) + " of " + std::to_string(blocks.size()) + " blocks";
  if (tokens) msg += ", " + std::to_string(*tokens) + " of " + std::to_string(total_tokens) + " tokens";
  size_t free_blocks = 0;
  for (size_t i = prefix; i < blocks.size(); ++i) free_blocks += blocks[i].order == BlockOrder::kFree;
  if (free_blocks)
    msg += "; " + std::to_string(free_blocks) + " free-order block(s) after it are reusable position-independently";
  plan.lint.push_back({"info", "reusable-prefix", "", SourceLocation{}, msg});
}

}  // namespace hypic::dsl
