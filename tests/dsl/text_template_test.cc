// The text-template language under hostile input: deep nesting is a located error (it used to
// overflow the stack), and renders that multiply are stopped.
#include <gtest/gtest.h>

#include "dsl/compiler.h"
#include "dsl/template.h"

using namespace hypic::dsl;

namespace {

std::string nested_ifs(int depth) {
  std::string s;
  for (int i = 0; i < depth; ++i) s += "{{#if a}}";
  s += "x";
  for (int i = 0; i < depth; ++i) s += "{{/if}}";
  return s;
}

TEST(TextTemplate, NestingDeeperThanTheLimitIsALocatedError) {
  const TextOrigin origin{"t.yaml", 3, 11, false};
  try {
    TextTemplate::parse(nested_ifs(20000), origin, "q");
    FAIL() << "accepted";
  } catch (const TemplateError& e) {
    EXPECT_NE(std::string(e.what()).find("sections ({{#if}}, {{#each}}) nested more than 64 deep"), std::string::npos)
        << e.what();
    EXPECT_EQ(e.location().file, "t.yaml");
    EXPECT_EQ(e.location().line, 3);
    EXPECT_EQ(e.block(), "q");
  }
  // At the limit it parses and renders.
  const TextTemplate t = TextTemplate::parse(nested_ifs(64), origin, "q");
  const Json yes = true;
  RenderEnv env;
  env.bindings.push_back({"a", &yes, MarkupPolicy::kReject, "a"});
  EXPECT_EQ(render(t, env), "x");
}

TEST(TextTemplate, NestedLoopsOverLoopBindingsRenderCorrectly) {
  // Found by text_template_fuzz: the inner loop's bindings reallocated the vector the outer loop's
  // binding pointed into (a heap use-after-free on the outer loop's next element).
  const TextTemplate t = TextTemplate::parse("{{#each xs as a}}{{#each xs as b}}{{#each a as c}}{{c}}{{b.0}}{{/each}};{{/each}}|{{/each}}",
                                             {"t.yaml", 1, 1, false}, "q");
  const Json xs = Json::parse(R"([["p", "q"], ["r"]])");
  RenderEnv env;
  env.bindings.push_back({"xs", &xs, MarkupPolicy::kReject, "xs"});
  env.bindings.shrink_to_fit();
  EXPECT_EQ(render(t, env), "ppqp;prqr;|rp;rr;|");
}

TEST(TextTemplate, MultiplyingRendersAreStopped) {
  // Eight nested loops over a list of 10: 10^8 iterations without the bound.
  std::string text;
  for (int i = 0; i < 8; ++i) text += "{{#each xs as x" + std::to_string(i) + "}}";
  text += "ab";
  for (int i = 0; i < 8; ++i) text += "{{/each}}";
  const TextTemplate t = TextTemplate::parse(text, {"t.yaml", 1, 1, false}, "q");
  const Json xs = Json::array({1, 2, 3, 4, 5, 6, 7, 8, 9, 10});
  RenderEnv env;
  env.bindings.push_back({"xs", &xs, MarkupPolicy::kReject, "xs"});
  try {
    render(t, env);
    FAIL() << "rendered";
  } catch (const VariableError& e) {
    EXPECT_NE(std::string(e.what()).find("rendering exceeds"), std::string::npos) << e.what();
  }
}

}  // namespace
