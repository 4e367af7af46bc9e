// A tool-using agent built entirely in C++ (no YAML): a calculator, a unit converter written here as a
// plain C++ callable, and the agent loop. Tool failures (unknown tool, bad arguments, a throwing tool)
// go back to the model as tool messages; the loop is bounded by max_steps.
//
//   example_tool_agent --model DIR [--max-tokens N] "question" ...
#include <cstdio>
#include <string>
#include <vector>

#include "runtime/error.h"
#include "sdk/agent.h"
#include "sdk/builtin_tools.h"
#include "sdk/template_builder.h"

using namespace hypic;

namespace {

sdk::Tool unit_converter() {
  sdk::Tool t;
  t.name = "convert_units";
  t.description = "Convert a length between km, m and mi.";
  t.parameters = sdk::Json::parse(R"({"type": "object", "required": ["value", "from", "to"], "properties": {
      "value": {"type": "number"},
      "from": {"type": "string", "enum": ["km", "m", "mi"]},
      "to": {"type": "string", "enum": ["km", "m", "mi"]}}})");
  t.fn = [](const sdk::Json& a) -> sdk::Json {
    auto meters = [](const std::string& u) { return u == "km" ? 1000.0 : u == "mi" ? 1609.344 : 1.0; };
    return a["value"].get<double>() * meters(a["from"]) / meters(a["to"]);
  };
  return t;
}

}  // namespace

int main(int argc, char** argv) {
  std::string model;
  int max_tokens = 256;
  std::vector<std::string> questions;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--model" && i + 1 < argc) model = argv[++i];
    else if (a == "--max-tokens" && i + 1 < argc) max_tokens = std::stoi(argv[++i]);
    else questions.push_back(a);
  }
  if (model.empty() || questions.empty()) {
    std::fprintf(stderr, "usage: example_tool_agent --model DIR [--max-tokens N] QUESTION...\n");
    return 2;
  }
  try {
    sdk::RuntimeOptions ro;
    ro.model_dir = model;
    auto rt = sdk::Runtime::open(ro);
    sdk::ToolRegistry tools;
    tools.add(sdk::calculator_tool());
    tools.add(unit_converter());
    const dsl::Template tpl = sdk::TemplateBuilder("tool_agent")
                                  .var("question", "string", {.volatile_ = true})
                                  .tool(tools.find("calculator") ? *tools.find("calculator") : sdk::Tool{})
                                  .tool(*tools.find("convert_units"))
                                  .system("system", "You are a careful assistant. Use the tools for arithmetic.", "pin")
                                  .tools_block()
                                  .user("question", "{{question}}", "none")
                                  .max_steps(4)
                                  .max_tokens(max_tokens)
                                  .build();
    sdk::Agent agent(*rt, tpl, tools);
    for (auto& q : questions) {
      sdk::AgentRunOptions opt;
      opt.on_text = [](std::string_view t) {
        std::fwrite(t.data(), 1, t.size(), stdout);
        std::fflush(stdout);
      };
      std::printf("question: %s\nanswer: ", q.c_str());
      const sdk::AgentResult r = agent.run(sdk::Json{{"question", q}}, opt);
      std::printf("\n");
      for (auto& t : r.tool_calls)
        std::printf("  tool %s %s -> %s\n", t.name.c_str(), t.arguments.dump().c_str(), t.result.c_str());
      std::printf("  steps: %d (%s)\n", r.steps, r.finish_reason.c_str());
    }
  } catch (const Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
