// hypic run TEMPLATE.yaml --vars F.json --model DIR [--docs-db FILE] [--db FILE --session ID]
//           [--mode hypic] [--seam 8] [--cache-mb N] [--max-steps N] [--top-k-chunks K] [--json]
// Runs the agent and prints its answer and per-block cache hits. F may hold one variables object or
// an array of them: the runs share one process and one segment store (later runs hit earlier blocks).
#include <cstdio>
#include <iostream>

#include "dsl/compiler.h"
#include "tools/hypic/agent_cli.h"

namespace hypic::cli {
namespace {

int run(int argc, char** argv) {
  Args args(argc, argv, {"json", "stream"});
  args.allow_only({"vars", "model", "docs-db", "db", "session", "mode", "seam", "cache-mb", "max-steps",
                   "top-k-chunks", "json", "stream"});
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
    else {
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
