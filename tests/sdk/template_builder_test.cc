#include "sdk/template_builder.h"

#include <gtest/gtest.h>

#include "dsl/compiler.h"
#include "dsl/errors.h"
#include "sdk/builtin_tools.h"

namespace hypic::sdk {
namespace {

TEST(TemplateBuilder, BuildsTheSamePlanAsYaml) {
  const dsl::Template built = TemplateBuilder("qa")
                                  .var("question", "string", {.volatile_ = true})
                                  .var("docs", "list", {.default_ = Json::array(), .items = "string"})
                                  .tool(calculator_tool())
                                  .system("system", "You answer from the documents.", "pin")
                                  .tools_block()
                                  .repeat("doc", "docs", "d", "{{d}}")
                                  .user("question", "{{question}}", "none")
                                  .max_steps(3)
                                  .build();
  const dsl::Template yaml = dsl::parse_template(R"(name: qa
vars:
  question: { type: string, volatile: true }
  docs: { type: list, default: [], items: string }
tools:
  - name: calculator
    description: Evaluate an arithmetic expression.
    parameters: { type: object, properties: { expression: { type: string } }, required: [expression] }
agent: { max_steps: 3 }
blocks:
  - { id: system, role: system, cache: pin, text: "You answer from the documents." }
  - { id: tools, tools: all }
  - { id: doc, role: user, for_each: docs, as: d, order: free, text: "{{d}}" }
  - { id: question, role: user, cache: none, text: "{{question}}" }
)", "inline.yaml");
  const Json vars{{"question", "1+1?"}, {"docs", Json::array({"a", "b"})}};
  const auto a = dsl::compile(built, vars), b = dsl::compile(yaml, vars);
  EXPECT_EQ(a.text(), b.text());
  ASSERT_EQ(a.blocks.size(), b.blocks.size());
  for (size_t i = 0; i < a.blocks.size(); ++i) EXPECT_EQ(a.blocks[i].id, b.blocks[i].id);
  EXPECT_EQ(built.agent.max_steps, 3);
}

TEST(TemplateBuilder, ErrorsComeFromTheDsl) {
  EXPECT_THROW(TemplateBuilder("bad").user("q", "{{undeclared}}").build(), dsl::TemplateError);
  EXPECT_THROW(TemplateBuilder("bad").user("q", "hi").penalties(0, 0, 0).build(), dsl::TemplateError);
}

TEST(TemplateBuilder, SamplingAndPenalties) {
  const dsl::Template t =
      TemplateBuilder("s").user("q", "hi").sampling(0.7, 0.9, 20, 5).penalties(0.5, -1.0, 1.1).build();
  EXPECT_DOUBLE_EQ(*t.agent.temperature, 0.7);
  EXPECT_DOUBLE_EQ(*t.agent.top_p, 0.9);
  EXPECT_EQ(*t.agent.top_k, 20);
  EXPECT_EQ(*t.agent.seed, 5u);
  EXPECT_DOUBLE_EQ(*t.agent.presence_penalty, 0.5);
  EXPECT_DOUBLE_EQ(*t.agent.frequency_penalty, -1.0);
  EXPECT_DOUBLE_EQ(*t.agent.repetition_penalty, 1.1);
}

}  // namespace
}  // namespace hypic::sdk
