// `hypic chat` (options: the registration at the end; `hypic chat --help` lists them).
// An interactive terminal chat that keeps history: every line is one agent run whose history slot
// holds the earlier turns (cached segments, so each turn computes little more than the new text).
// /exit or end of input quits. With --db the conversation persists and resumes by --session.
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>
#include <unistd.h>

#include "tools/hypic/agent_cli.h"

namespace hypic::cli {
namespace {

// Used without --template: system prompt, tool docs, history, the new message.
constexpr const char* kDefaultTemplate = R"(name: chat
vars:
  history: { type: list, default: [], markup: neutralize }
  question: { type: string, volatile: true }
  system: { type: string, default: "You are a helpful assistant." }
tools:
  - name: calculator
    description: Evaluate an arithmetic expression.
    parameters:
      type: object
      properties:
        expression: { type: string }
      required: [expression]
agent:
  max_steps: 4
  max_tokens: 256
blocks:
  - id: system
    role: system
    cache: pin
    text: "{{system}}"
  - id: tools
    tools: all
  - id: history
    history: history
  - id: message
    role: user
    cache: none
    text: "{{question}}"
)";

struct Options {
  AgentOptions agent;
  std::string template_path, db, session = "chat", system, template_root;
};

int run(const Options& o) {
  dsl::LoadOptions load;
  load.template_root = o.template_root;
  dsl::Template tpl = !o.template_path.empty() ? dsl::load_template(o.template_path, load)
                                               : dsl::parse_template(kDefaultTemplate, "<built-in chat template>");
  apply_sampling_flags(o.agent, tpl.agent);
  AgentEnv env = open_agent_env(o.agent);
  // Without --db the history lives in a temporary database for this process only.
  std::string db = o.db;
  std::string tmp;
  if (db.empty()) {
    tmp = (std::filesystem::temp_directory_path() / ("hypic_chat_" + std::to_string(::getpid()) + ".sqlite")).string();
    db = tmp;
  }
  struct Cleanup {
    std::string path;
    ~Cleanup() {
      if (!path.empty()) {
        std::error_code ec;
        for (auto suffix : {"", "-wal", "-shm"}) std::filesystem::remove(path + suffix, ec);
      }
    }
  } cleanup{tmp};
  sdk::HistoryStore history = sdk::HistoryStore::open(db);
  const std::string& session = o.session;
  sdk::Agent agent(*env.runtime, tpl, env.tools);
  agent.set_history(&history, session);
  const size_t earlier = history.messages(session).size();
  if (earlier) std::fprintf(stderr, "(resuming session '%s': %zu earlier messages)\n", session.c_str(), earlier);

  sdk::AgentRunOptions opt;
  opt.on_text = [](std::string_view t) {
    std::fwrite(t.data(), 1, t.size(), stdout);
    std::fflush(stdout);
  };
  const bool tty = isatty(0);
  for (std::string line;;) {
    if (tty) std::fprintf(stderr, "> ");
    if (!std::getline(std::cin, line) || line == "/exit") break;
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    sdk::Json vars{{"question", line}};
    if (!o.system.empty()) vars["system"] = o.system;
    retrieve_into(env, tpl, vars, "chunks", "question", static_cast<size_t>(o.agent.top_k_chunks));
    try {
      const sdk::AgentResult r = agent.run(vars, opt);
      std::printf("\n");
      int hits = 0;
      for (auto& b : r.blocks) hits += b.hit;
      std::fprintf(stderr, "  [%d/%zu blocks hit, %lld/%lld tokens computed, TTFT %.1f ms, %s]\n", hits, r.blocks.size(),
                   static_cast<long long>(r.computed_tokens), static_cast<long long>(r.prompt_tokens), r.ttft_ms,
                   r.finish_reason.c_str());
      if (r.verify.checked)
        std::fprintf(stderr, "  [verify: %lld hit block(s) vs a full recompute: first-token KL %.3g, top-1 %s]\n",
                     static_cast<long long>(r.verify.hit_blocks), r.verify.kl, r.verify.top1_agrees ? "agrees" : "DIFFERS");
    } catch (const Error& e) {
      // A bad line (e.g. chat markup typed into the message) must not end the conversation.
      std::fprintf(stderr, "error: %s\n", e.what());
    }
  }
  return 0;
}

Registrar reg("chat", "interactive terminal chat that keeps history", [](CLI::App& app) {
  auto o = std::make_shared<Options>();
  add_agent_options(app, o->agent);
  app.add_option("--template", o->template_path,
                 "agent template with a `question` variable (default: a built-in chat with history and a calculator)");
  app.add_option("--template-root", o->template_root, "folder that the template's includes may reach (default: the template's own folder)")->check(CLI::ExistingDirectory);
  app.add_option("--db", o->db, "SQLite history database: the conversation persists (default: a temporary one)");
  app.add_option("--session", o->session, "history session id to start or resume");
  app.add_option("--system", o->system, "the built-in template's system prompt (its `system` variable)");
  return [o] { return run(*o); };
});

}  // namespace
}  // namespace hypic::cli
