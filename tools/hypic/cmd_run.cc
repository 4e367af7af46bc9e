// hypic run TEMPLATE.yaml --vars F.json --model DIR [--device cpu|cuda|auto] [--docs-db FILE] [--db FILE --session ID]
//           [--mode hypic] [--seam 8] [--cache-mb N] [--max-steps N] [--top-k-chunks K] [--json | --brief]
//           [--chat-template FILE]
// Runs the agent and prints its answer and per-block cache hits. F may hold one variables object or
// an array of them: the runs share one process and one segment store (later runs hit earlier blocks).
#include <cstdio>
#include <iostream>

#include "dsl/compiler.h"
#include "tools/hypic/agent_cli.h"

namespace hypic::cli {
namespace {

int run(int argc, char** argv) {
  Args args(argc, argv, {"json", "stream", "brief"});
  args.allow_only({"vars", "model", "device", "docs-db", "db", "session", "mode", "seam", "cache-mb", "max-steps",
                   "top-k-chunks", "json", "stream", "brief", "chat-template"});
  if (args.positionals().size() != 1) throw UsageError("expected exactly one TEMPLATE.yaml");
  const dsl::Template tpl = dsl::load_template(args.positionals()[0]);
  const sdk::Json given = dsl::load_variables(args.require("vars"));
  AgentEnv env = open_agent_env(args);
  std::optional<sdk::HistoryStore> history;
  if (args.has("db")) history.emplace(sdk::HistoryStore::open(args.get("db", "")));

  sdk::Agent agent(*env.runtime, tpl, env.tools);
  if (history) agent.set_history(&*history, args.get("session", "default"));
  sdk::AgentRunOptions opt;
  if (args.has("max-steps")) opt.max_steps = static_cast<int>(args.get_int("max-steps", 8));
  const bool json = args.has("json");
  if (args.has("stream") && !json) opt.on_text = [](std::string_view t) { std::fwrite(t.data(), 1, t.size(), stdout); std::fflush(stdout); };

  std::vector<sdk::Json> runs;
  if (given.is_array()) for (auto& v : given) runs.push_back(v);
  else runs.push_back(given);
  sdk::Json all = sdk::Json::array();
  for (auto& vars : runs) {
    retrieve_into(env, tpl, vars, "chunks", "question", static_cast<size_t>(args.get_int("top-k-chunks", 4)));
    const sdk::AgentResult r = agent.run(vars, opt);
    if (json) all.push_back(report_json(r));
    else if (args.has("brief")) {
      // One line per run: the question (when the template has one), the answer, the cache summary.
      int hits = 0;
      for (auto& b : r.blocks) hits += b.hit;
      const std::string q = vars.contains("question") && vars["question"].is_string() ? vars["question"].get<std::string>() : "";
      std::printf("%-34s -> %-10s  %2d/%-2zu blocks hit  %4lld/%-4lld tokens computed  TTFT %6.1f ms\n",
                  q.substr(0, 34).c_str(), r.answer.c_str(), hits, r.blocks.size(),
                  static_cast<long long>(r.computed_tokens), static_cast<long long>(r.prompt_tokens), r.ttft_ms);
    } else {
      if (opt.on_text) std::printf("\n");
      print_report(r, !opt.on_text);
    }
  }
  if (json) std::cout << (all.size() == 1 ? all[0] : all).dump(2) << "\n";
  return 0;
}

Registrar reg("run", "run an agent template on a model: answer + per-block cache hits", run);

}  // namespace
}  // namespace hypic::cli
