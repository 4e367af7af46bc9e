// The {{...}} text-template language: parse any text, then render it against fixed variables.
#include "dsl/errors.h"
#include "dsl/text_template.h"
#include "tests/fuzz/fuzz_util.h"

using hypic::dsl::Json;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const Json vars = Json::parse(
      R"({"name": "Ada", "n": 3, "flag": true, "xs": ["a", "b"], "obj": {"f": "v", "xs": [{"g": 1}]}, "e": []})");
  try {
    const hypic::dsl::TextTemplate t =
        hypic::dsl::TextTemplate::parse(hypic::fuzz::as_text(data, size), {"fuzz.yaml", 1, 1, false}, "b");
    // Unbound names are refused when a template loads (the compiler's check), before any render.
    for (const auto& use : hypic::dsl::variable_uses(t))
      if (!vars.contains(use.path[0])) return 0;
    hypic::dsl::RenderEnv env;
    for (const auto& [k, v] : vars.items()) env.bindings.push_back({k, &v, hypic::dsl::MarkupPolicy::kReject, k});
    env.block = "b";
    env.vars_source = "vars.json";
    hypic::dsl::render(t, env);
  } catch (const hypic::dsl::TemplateError&) {
  }
  return 0;
}
