#include "dsl/prompt_plan.h"

#include "dsl/plan_tokenizer.h"

namespace hypic::dsl {

std::string PromptPlan::text() const {
  std::string s;
  for (const auto& b : blocks) s += b.text;
  return s;
}

Json PromptPlan::to_json() const {
  Json j;
  j["name"] = name;
  j["chat_format"] = chat_format;
  Json blocks_json = Json::array();
  for (const auto& b : blocks) {
    Json e;
    e["id"] = b.id;
    e["group"] = b.group;
    e["kind"] = b.kind;
    e["role"] = b.role;
    e["message"] = b.message;
    e["text"] = b.text;
    e["content"] = b.content;
    e["tokens"] = b.tokens ? Json(*b.tokens) : Json(nullptr);
    e["content_key"] = b.content_key ? Json(b.content_key->hex()) : Json(nullptr);
    e["chain_key"] = b.chain_key ? Json(b.chain_key->hex()) : Json(nullptr);
    e["cache"] = cache_policy_name(b.cache);
    e["order"] = block_order_name(b.order);
    e["volatile"] = b.is_volatile;
    e["source"] = b.loc.str();
    blocks_json.push_back(std::move(e));
  }
  j["blocks"] = std::move(blocks_json);
  j["generation_prompt"] = generation_prompt;
  j["tools"] = tools;
  Json a;
  a["max_steps"] = agent.max_steps;
  a["tool_choice"] = agent.tool_choice;
  a["stop"] = agent.stop;
  a["max_tokens"] = agent.max_tokens ? Json(*agent.max_tokens) : Json(nullptr);
  a["temperature"] = agent.temperature ? Json(*agent.temperature) : Json(nullptr);
  a["top_p"] = agent.top_p ? Json(*agent.top_p) : Json(nullptr);
  a["top_k"] = agent.top_k ? Json(*agent.top_k) : Json(nullptr);
  a["presence_penalty"] = agent.presence_penalty ? Json(*agent.presence_penalty) : Json(nullptr);
  a["frequency_penalty"] = agent.frequency_penalty ? Json(*agent.frequency_penalty) : Json(nullptr);
  a["repetition_penalty"] = agent.repetition_penalty ? Json(*agent.repetition_penalty) : Json(nullptr);
  a["seed"] = agent.seed ? Json(*agent.seed) : Json(nullptr);
  a["thinking"] = agent.thinking ? Json(*agent.thinking) : Json(nullptr);
  j["agent"] = std::move(a);
  j["reusable_prefix"] = {{"blocks", reusable_prefix_blocks},
                          {"tokens", reusable_prefix_tokens ? Json(*reusable_prefix_tokens) : Json(nullptr)}};
  Json lint_json = Json::array();
  for (const auto& f : lint) {
    Json e;
    e["level"] = f.level;
    e["code"] = f.code;
    e["block"] = f.block;
    e["source"] = f.loc.str();
    e["message"] = f.message;
    lint_json.push_back(std::move(e));
  }
  j["lint"] = std::move(lint_json);
  return j;
}

void assign_tokens_and_keys(PromptPlan& plan, const PlanTokenizer& tokenizer, const KeyContext& ctx) {
  std::optional<SegmentKey> parent;
  for (auto& b : plan.blocks) {
    b.tokens = tokenizer.encode(b.text);
    b.content_key = content_key(ctx, *b.tokens);
    b.chain_key = chain_key(parent, *b.content_key);
    parent = b.chain_key;
  }
}

}  // namespace hypic::dsl
