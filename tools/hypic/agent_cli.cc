#include "tools/hypic/agent_cli.h"

#include <cstdio>
#include <filesystem>

#include "sdk/builtin_tools.h"
#include "tools/common/weights_prefetch.h"

namespace hypic::cli {

void add_agent_options(CLI::App& app, AgentOptions& o) {
  app.add_option("--model", o.model, "model directory (config.json, *.safetensors, tokenizer files)")->required();
  add_device(app, o.device, "cpu, cuda or auto (CUDA where built and a GPU is present, else the CPU)");
  app.add_option("--mode", o.mode, "cache mode")->check(CLI::IsMember({"full", "prefix", "hypic", "naive", "noseam"}));
  tools::add_int(app, "--seam", o.seam, "seam width (tokens recomputed at the start of a reused block)", 0LL, 65536LL);
  tools::add_int(app, "--cache-mb", o.cache_mb, "segment store budget, in MiB", 1LL, 1LL << 24);
  tools::add_int(app, "--host-cache-mb", o.host_cache_mb, "host-memory tier for entries evicted from the store, in MiB (0: none)",
                 0LL, 1LL << 24);
  app.add_option("--cache-dir", o.cache_dir, "disk tier: cached blocks persist here across runs (hypic cache ls|stats|verify|clear)");
  tools::add_int(app, "--disk-cache-mb", o.disk_cache_mb, "budget of --cache-dir, in MiB (0: unlimited)", 0LL, 1LL << 30);
  app.add_option("--cache-format", o.cache_format,
                 "entries below the device: fp32 (exact), bf16 (states in bf16), compact (bf16, first-block seam recomputed)")
      ->check(CLI::IsMember({"fp32", "bf16", "compact"}));
  app.add_option("--verify-hits", o.verify_hits,
                 "fraction of requests with cache hits recomputed in full mode: first-token KL and top-1 agreement")
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--docs-db", o.docs_db,
                 "retrieval database (hypic ingest): fills the template's `chunks` and adds the search_docs tool");
  tools::add_int(app, "--top-k-chunks", o.top_k_chunks, "chunks retrieved into `chunks` with --docs-db", 1LL, 10000LL);
  app.add_option("--chat-template", o.chat_template, "a Jinja chat template file to use instead of the model's own");
  // The sampling flags: no default shown, since leaving one out keeps the template's value.
  app.add_option("--temperature", o.temperature, "sampling temperature, 0 greedy (default: the template's agent.temperature, else 0)")
      ->check(CLI::Range(0.0, 100.0))->default_str("");
  app.add_option("--top-p", o.top_p, "nucleus sampling mass in (0, 1] (default: the template's)")
      ->check(CLI::Range(1e-9, 1.0))->default_str("");
  app.add_option("--top-k", o.top_k, "keep the k most likely tokens, 0 all (default: the template's)")
      ->check(CLI::Range(0LL, 1LL << 24))->default_str("");
  app.add_option("--seed", o.seed, "sampling seed (default: the template's, else 0)")
      ->check(CLI::Range(0LL, 1LL << 62))->default_str("");
  app.add_option("--max-tokens", o.max_tokens, "tokens a reply may take (default: the template's, else 512)")
      ->check(CLI::Range(1LL, 1LL << 24))->default_str("");
  app.add_option("--presence-penalty", o.presence_penalty, "subtracted once from the logit of every token the reply has used, in [-2, 2]")
      ->check(CLI::Range(-2.0, 2.0))->default_str("");
  app.add_option("--frequency-penalty", o.frequency_penalty, "subtracted from a token's logit per use in the reply, in [-2, 2]")
      ->check(CLI::Range(-2.0, 2.0))->default_str("");
  app.add_option("--repetition-penalty", o.repetition_penalty,
                 "divides positive and multiplies negative logits of tokens in the prompt or reply, in (0, 2]; 1 is off")
      ->check(CLI::Range(1e-9, 2.0))->default_str("");
  add_quiet(app, o.quiet);
  tools::configure(app, /*uses_model=*/true);
}

void apply_sampling_flags(const AgentOptions& o, dsl::AgentSettings& s) {
  if (!std::isnan(o.temperature)) s.temperature = o.temperature;
  if (!std::isnan(o.top_p)) s.top_p = o.top_p;
  if (o.top_k >= 0) s.top_k = static_cast<int>(o.top_k);
  if (o.seed >= 0) s.seed = static_cast<uint64_t>(o.seed);
  if (o.max_tokens > 0) s.max_tokens = static_cast<int>(o.max_tokens);
  if (!std::isnan(o.presence_penalty)) s.presence_penalty = o.presence_penalty;
  if (!std::isnan(o.frequency_penalty)) s.frequency_penalty = o.frequency_penalty;
  if (!std::isnan(o.repetition_penalty)) s.repetition_penalty = o.repetition_penalty;
}

AgentEnv open_agent_env(const AgentOptions& o) {
  AgentEnv env;
  sdk::RuntimeOptions ro;
  ro.model_dir = o.model;
  ro.device = o.device;
  ro.mode = parse_mode(o.mode);
  ro.seam_width = o.seam;
  ro.cache_bytes = static_cast<size_t>(o.cache_mb) << 20;
  ro.host_cache_bytes = static_cast<size_t>(o.host_cache_mb) << 20;
  ro.cache_dir = o.cache_dir;
  ro.disk_cache_bytes = static_cast<size_t>(o.disk_cache_mb) << 20;
  ro.cache_format = parse_cache_format(o.cache_format);
  ro.verify_hits_rate = o.verify_hits;
  ro.chat_template_file = o.chat_template;
  tools::prefetch_weights(o.model, o.quiet);
  env.runtime = sdk::Runtime::open(ro);
  std::fprintf(stderr, "hypic: %s on %s, %s mode, %s chat format\n", ro.model_dir.c_str(),
               device_name(env.runtime->device()), mode_name(ro.mode), env.runtime->chat_format().name().c_str());
  env.tools.add(sdk::calculator_tool());
  if (!o.docs_db.empty()) {
    // Opening would create an empty database where the path is mistyped.
    if (!std::filesystem::exists(o.docs_db))
      throw IoError("no database '" + o.docs_db + "' (create it with hypic ingest)");
    env.docs.emplace(sdk::FtsRetriever::open(o.docs_db));
    env.tools.add(sdk::search_docs_tool(*env.docs));
  }
  return env;
}

void retrieve_into(const AgentEnv& env, const dsl::Template& tpl, sdk::Json& vars, const std::string& into,
                   const std::string& query_var, size_t k) {
  if (!env.docs || vars.contains(into) || !vars.contains(query_var) || !vars[query_var].is_string()) return;
  for (auto& v : tpl.vars)
    if (v.name == into) {
      vars[into] = sdk::chunks_to_json(env.docs->search(vars[query_var].get<std::string>(), k));
      return;
    }
}

void print_report(const sdk::AgentResult& r, bool show_answer) {
  if (show_answer) std::printf("%s\n", r.answer.c_str());
  for (auto& t : r.tool_calls)
    std::printf("  [tool] %s %s -> %s%s\n", t.name.c_str(), t.arguments.dump().c_str(), t.ok ? "" : "(error) ",
                t.result.substr(0, 200).c_str());
  int hits = 0;
  for (auto& b : r.blocks) hits += b.hit;
  std::printf("  [cache] %d/%zu blocks hit, %lld of %lld prompt tokens computed, TTFT %.1f ms, %d step(s), %s\n", hits,
              r.blocks.size(), static_cast<long long>(r.computed_tokens), static_cast<long long>(r.prompt_tokens),
              r.ttft_ms, r.steps, r.finish_reason.c_str());
  for (auto& b : r.blocks)
    std::printf("    %-28s %-5s %5lld tokens  %s\n", b.id.substr(0, 28).c_str(), b.cache.c_str(),
                static_cast<long long>(b.tokens), b.hit ? "hit" : "computed");
  if (r.verify.checked)
    std::printf("  [verify] the %lld hit block(s) against a full recompute: first-token KL %.3g, top-1 %s\n",
                static_cast<long long>(r.verify.hit_blocks), r.verify.kl, r.verify.top1_agrees ? "agrees" : "DIFFERS");
}

sdk::Json report_json(const sdk::AgentResult& r) {
  sdk::Json j;
  j["answer"] = r.answer;
  j["finish_reason"] = r.finish_reason;
  j["steps"] = r.steps;
  j["ttft_ms"] = r.ttft_ms;
  j["prompt_tokens"] = r.prompt_tokens;
  j["computed_tokens"] = r.computed_tokens;
  j["step_reports"] = sdk::Json::array();
  for (auto& st : r.step_reports)
    j["step_reports"].push_back(
        {{"computed_tokens", st.computed_tokens}, {"reused_tokens", st.reused_tokens}, {"ttft_ms", st.ttft_ms}});
  j["tool_calls"] = sdk::Json::array();
  for (auto& t : r.tool_calls)
    j["tool_calls"].push_back({{"name", t.name}, {"arguments", t.arguments}, {"ok", t.ok}, {"result", t.result}});
  j["blocks"] = sdk::Json::array();
  for (auto& b : r.blocks) j["blocks"].push_back({{"id", b.id}, {"cache", b.cache}, {"tokens", b.tokens}, {"hit", b.hit}});
  if (r.verify.checked)
    j["verify"] = {{"hit_blocks", r.verify.hit_blocks}, {"kl", r.verify.kl}, {"top1_agrees", r.verify.top1_agrees}};
  return j;
}

}  // namespace hypic::cli
