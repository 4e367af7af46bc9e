// Pieces shared by `hypic run` and `hypic chat`: opening the runtime and the tools from options, and
// printing an agent run's report.
#pragma once
#include <cmath>
#include <memory>
#include <optional>
#include <string>

#include "sdk/agent.h"
#include "sdk/fts_retriever.h"
#include "tools/hypic/cli_args.h"

namespace hypic::cli {

struct AgentEnv {
  std::unique_ptr<sdk::Runtime> runtime;
  std::optional<sdk::FtsRetriever> docs;  // --docs-db
  sdk::ToolRegistry tools;                // calculator, and search_docs with --docs-db
};

// The options of an agent run (`hypic run`, `hypic chat`).
struct AgentOptions {
  std::string model, device = "auto", mode = "hypic", docs_db, chat_template, cache_dir, cache_format = "fp32";
  long long seam = 8, cache_mb = 1024, top_k_chunks = 4, host_cache_mb = 0, disk_cache_mb = 0;
  double verify_hits = 0;
  bool quiet = false;
  // Overrides of the template's agent settings (unset: the template's): NaN and -1 mean unset.
  double temperature = NAN, top_p = NAN, presence_penalty = NAN, frequency_penalty = NAN, repetition_penalty = NAN;
  long long top_k = -1, seed = -1, max_tokens = -1;
};

// The template's agent settings with the sampling flags given on the command line in their place.
void apply_sampling_flags(const AgentOptions& o, dsl::AgentSettings& s);

// Declares --model, --device, --mode, --seam, --cache-mb, --host-cache-mb, --cache-dir, --disk-cache-mb,
// --cache-format, --verify-hits, --docs-db, --top-k-chunks, --chat-template (a Jinja template file instead of the
// model's own), the sampling flags (--temperature, --top-p, --top-k, --seed, --max-tokens, --presence-penalty,
// --frequency-penalty, --repetition-penalty: the template's agent settings otherwise), --quiet and the
// environment footer.
void add_agent_options(CLI::App& app, AgentOptions& o);

// Opens the runtime and the tools; says on stderr which device the model runs on and which chat format
// it speaks.
AgentEnv open_agent_env(const AgentOptions& o);

// Fills the list variable `into` with the best chunks for vars[query_var] when the template declares
// `into`, a retriever is open and the caller gave no value.
void retrieve_into(const AgentEnv& env, const dsl::Template& tpl, sdk::Json& vars, const std::string& into,
                   const std::string& query_var, size_t k);

// Human-readable report of one run (answer, tool calls, per-block cache hits, timing).
void print_report(const sdk::AgentResult& r, bool show_answer);
sdk::Json report_json(const sdk::AgentResult& r);

}  // namespace hypic::cli
