// Prefix-stability lint: a volatile block (per-query text, cache: none) before stable blocks makes
// every later block miss the exact-prefix cache. Reports each such block and the reusable prefix.
#pragma once
#include "dsl/prompt_plan.h"

namespace hypic::dsl {

// Variable names that usually change per request; blocks reading them are volatile.
bool is_per_query_name(const std::string& name);

// Fills plan.lint, plan.reusable_prefix_blocks and (when tokens are known) plan.reusable_prefix_tokens.
void lint_plan(PromptPlan& plan);

}  // namespace hypic::dsl
