// `hypic run`: runs the agent and prints its answer and per-block cache hits. The --vars file may hold
// one variables object or an array of them: the runs share one process and one segment store (later
// runs hit earlier blocks).
#include <cstdio>
#include <iostream>
#include <memory>

#include "dsl/compiler.h"
#include "tools/hypic/agent_cli.h"

namespace hypic::cli {
namespace {

struct Options {
  AgentOptions agent;
  std::string template_path, vars, db, session = "default", template_root;
  long long max_steps = 0;  // 0: the template's agent.max_steps
  bool json = false, stream = false, brief = false;
};

int run(const Options& o) {
  dsl::LoadOptions load;
  load.template_root = o.template_root;
  dsl::Template tpl = dsl::load_template(o.template_path, load);
  apply_sampling_flags(o.agent, tpl.agent);
  const sdk::Json given = dsl::load_variables(o.vars);
  AgentEnv env = open_agent_env(o.agent);
  std::optional<sdk::HistoryStore> history;
  if (!o.db.empty()) history.emplace(sdk::HistoryStore::open(o.db));

  sdk::Agent agent(*env.runtime, tpl, env.tools);
  if (history) agent.set_history(&*history, o.session);
  sdk::AgentRunOptions opt;
  if (o.max_steps > 0) opt.max_steps = static_cast<int>(o.max_steps);
  const bool json = o.json;
  if (o.stream && !json) opt.on_text = [](std::string_view t) { std::fwrite(t.data(), 1, t.size(), stdout); std::fflush(stdout); };

  std::vector<sdk::Json> runs;
  if (given.is_array()) for (auto& v : given) runs.push_back(v);
  else runs.push_back(given);
  sdk::Json all = sdk::Json::array();
  for (auto& vars : runs) {
    retrieve_into(env, tpl, vars, "chunks", "question", static_cast<size_t>(o.agent.top_k_chunks));
    const sdk::AgentResult r = agent.run(vars, opt);
    if (json) all.push_back(report_json(r));
    else if (o.brief) {
      // One line per run: the question (when the template has one), the answer, the cache summary.
      int hits = 0;
      for (auto& b : r.blocks) hits += b.hit;
      const std::string q = vars.contains("question") && vars["question"].is_string() ? vars["question"].get<std::string>() : "";
      std::printf("%-34s -> %-10s  %2d/%-2zu blocks hit  %4lld/%-4lld tokens computed  TTFT %6.1f ms",
                  q.substr(0, 34).c_str(), r.answer.c_str(), hits, r.blocks.size(),
                  static_cast<long long>(r.computed_tokens), static_cast<long long>(r.prompt_tokens), r.ttft_ms);
      if (r.verify.checked) std::printf("  verify: KL %.3g, top-1 %s", r.verify.kl, r.verify.top1_agrees ? "agrees" : "DIFFERS");
      std::printf("\n");
    } else {
      if (opt.on_text) std::printf("\n");
      print_report(r, !opt.on_text);
    }
  }
  if (json) std::cout << (all.size() == 1 ? all[0] : all).dump(2) << "\n";
  return 0;
}

Registrar reg("run", "run an agent template on a model: answer + per-block cache hits", [](CLI::App& app) {
  auto o = std::make_shared<Options>();
  app.add_option("TEMPLATE", o->template_path, "the agent's YAML template")->required();
  app.add_option("--vars", o->vars, "variables: one JSON/YAML object, or an array of them (one run each)")->required();
  app.add_option("--template-root", o->template_root, "folder that the template's includes may reach (default: the template's own folder)")->check(CLI::ExistingDirectory);
  add_agent_options(app, o->agent);
  app.add_option("--db", o->db, "SQLite history database: the conversation persists across runs");
  app.add_option("--session", o->session, "history session id (with --db)");
  tools::add_int(app, "--max-steps", o->max_steps, "agent steps per run (0: the template's agent.max_steps)", 0LL,
                 1000000LL);
  auto* json = app.add_flag("--json", o->json, "print each run's report as JSON");
  app.add_flag("--stream", o->stream, "print the answer as it is generated");
  app.add_flag("--brief", o->brief, "one line per run")->excludes(json);
  return [o] { return run(*o); };
});

}  // namespace
}  // namespace hypic::cli
