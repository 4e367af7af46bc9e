// `hypic eval-pic` (options: the registration at the end; `hypic eval-pic --help` lists them).
// Runs every prompt in every mode in one process (each mode with its own segment store, warmed by the
// prompts before it, or by all prompts with --prewarm) and compares each mode with `full`.
// --device cuda runs the engine on the CUDA backend (bf16, device-resident cache) instead of the CPU (fp32).
// --show N prints the first N prompts' answers per mode to stderr (stdout stays one JSON object).
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>

#include <nlohmann/json.hpp>

#include "kernels/sampling.h"
#include "runtime/engine.h"
#include "runtime/text/chat_format.h"
#include "runtime/eval_prompts.h"
#include "runtime/text/tokenizer.h"
#include "runtime/text/tokenizer_fingerprint.h"
#include "tools/common/progress.h"
#include "tools/hypic/cli_args.h"
#include "tools/hypic/open_model.h"

namespace hypic::cli {
namespace {

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> v;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, sep);)
    if (!item.empty()) v.push_back(item);
  return v;
}

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t\r\n") - b + 1);
}

struct ModeStats {
  int top1 = 0, greedy = 0, exact = 0, with_answer = 0, n = 0;
  double kl = 0, computed = 0, prompt_tokens = 0;
  int64_t block_hits = 0, blocks = 0;
  std::vector<double> ttft;
};

struct EvalSetup {
  std::vector<EvalPrompt> prompts;
  std::vector<std::vector<std::vector<int>>> tokenized;
  std::vector<CacheMode> modes;
  EngineOptions opt;
  long long n_decode = 16, show = 0;
  bool prewarm = false, quiet = false;
  std::vector<std::string> markers;  // the chat format's markup, dropped when a prompt is shown
};

// Every prompt in every mode against `full`, every engine on the same backend.
std::map<CacheMode, ModeStats> evaluate(Backend& model, const EvalSetup& e, const Tokenizer& tok,
                                        const std::vector<int>& stop_ids) {
  const auto& prompts = e.prompts;
  const auto& tokenized = e.tokenized;
  const auto& modes = e.modes;
  const long long n_decode = e.n_decode, show = e.show;
  const EngineOptions& opt = e.opt;
  Engine reference(model, CacheMode::Full, opt);
  std::map<CacheMode, std::unique_ptr<Engine>> engines;
  for (auto m : modes) engines[m] = std::make_unique<Engine>(model, m, opt);
  if (e.prewarm)
    for (auto& [m, eng] : engines)
      if (m != CacheMode::Full)
        for (auto& blocks : tokenized) eng->run(blocks);

  std::map<CacheMode, ModeStats> stats;
  tools::Progress progress("eval-pic prompts", prompts.size(), e.quiet);
  for (size_t i = 0; i < prompts.size(); ++i) {
    progress.update(i);
    auto ref = reference.run(tokenized[i]);
    const std::vector<float> ref_logits = ref.logits;
    const std::vector<int> ref_tokens = reference.greedy_decode(ref, static_cast<int>(n_decode));
    const int ref_top1 = ref_tokens[0];
    auto text_of = [&](const std::vector<int>& toks) {
      auto end = std::find_first_of(toks.begin(), toks.end(), stop_ids.begin(), stop_ids.end());
      return trim(tok.decode(std::vector<int>(toks.begin(), end)));
    };
    const bool shown = static_cast<long long>(i) < show;
    if (shown) {
      progress.clear();
      std::string q = prompts[i].blocks.back();
      for (const std::string& mark : e.markers)
        for (size_t at; (at = q.find(mark)) != std::string::npos;) q.erase(at, mark.size());
      if (const auto nl = trim(q).find('\n'); nl != std::string::npos) q = trim(q).substr(0, nl);  // drop the role header
      std::fprintf(stderr, "prompt %zu (%zu blocks): %s\n", i + 1, prompts[i].blocks.size(), trim(q).c_str());
      if (prompts[i].answer) std::fprintf(stderr, "  expected: %s\n", prompts[i].answer->c_str());
    }
    for (auto m : modes) {
      auto r = m == CacheMode::Full ? reference.run(tokenized[i]) : engines[m]->run(tokenized[i]);
      const std::vector<float> first = r.logits;
      const std::vector<int> toks = engines[m]->greedy_decode(r, static_cast<int>(n_decode));
      ModeStats& s = stats[m];
      ++s.n;
      s.top1 += toks[0] == ref_top1;
      s.greedy += toks == ref_tokens;
      s.kl += cpu::kl_divergence(ref_logits.data(), first.data(), static_cast<int64_t>(first.size()));
      s.computed += static_cast<double>(r.computed_tokens);
      s.prompt_tokens += static_cast<double>(r.prompt_tokens);
      s.ttft.push_back(r.ttft_ms);
      for (auto& b : r.blocks) {
        s.block_hits += b.hit;
        ++s.blocks;
      }
      const std::string text = text_of(toks);
      if (prompts[i].answer) {
        ++s.with_answer;
        s.exact += text == trim(*prompts[i].answer);
      }
      if (shown) {
        int hits = 0;
        for (auto& b : r.blocks) hits += b.hit;
        std::fprintf(stderr, "  %-7s %-12s blocks hit %d/%zu, computed %5lld of %5lld tokens, TTFT %7.1f ms\n",
                     mode_name(m), ("\"" + text + "\"").c_str(), hits, r.blocks.size(),
                     static_cast<long long>(r.computed_tokens), static_cast<long long>(r.prompt_tokens), r.ttft_ms);
      }
    }
  }

  progress.update(prompts.size());
  return stats;
}

// The --modes list: comma-separated mode names, at least one, each once.
std::string check_modes(const std::string& v) {
  const std::vector<std::string> names = split(v, ',');
  if (names.empty()) return "expected a comma-separated list of modes (full, prefix, hypic, naive, noseam)";
  std::vector<CacheMode> seen;
  for (const auto& n : names) {
    CacheMode m;
    try {
      m = parse_mode(n);
    } catch (const InvalidArgument& e) {
      return e.what();
    }
    if (std::find(seen.begin(), seen.end(), m) != seen.end()) return "mode '" + n + "' is given twice";
    seen.push_back(m);
  }
  return "";
}

struct Options {
  ModelOptions model;
  std::string prompts, modes = "full,prefix,hypic,naive,noseam";
  long long seam = 8, decode_tokens = 16, cache_mb = 1024, show = 0;
  bool prewarm = false;
};

int run(const Options& o) {
  EvalSetup e;
  e.show = o.show;
  e.prewarm = o.prewarm;
  e.quiet = o.model.quiet;
  const std::string dir = o.model.model;
  const Tokenizer tok = Tokenizer::from_file((std::filesystem::path(dir) / "tokenizer.json").string());
  e.prompts = load_eval_prompts(o.prompts);
  for (auto& m : split(o.modes, ',')) e.modes.push_back(parse_mode(m));
  const long long seam = o.seam;
  e.n_decode = o.decode_tokens;
  e.opt.seam_width = seam;
  e.opt.cache_budget_bytes = static_cast<size_t>(o.cache_mb) << 20;
  e.opt.tokenizer_fingerprint = tokenizer_fingerprint(tok);
  for (auto& p : e.prompts) {
    std::vector<std::vector<int>> blocks;
    for (auto& b : p.blocks) blocks.push_back(tok.encode(b));
    e.tokenized.push_back(std::move(blocks));
  }
  // The prompts are rendered in the model's chat format; its stop tokens end the greedy answers.
  const std::unique_ptr<ChatFormat> format = load_chat_format(dir);
  e.markers = format->reserved_markers();
  const std::vector<int> stop_ids = chat_stop_ids(*format, tok, dir);

  auto model = open_model(o.model);
  std::map<CacheMode, ModeStats> stats = evaluate(*model, e, tok, stop_ids);
  const auto& modes = e.modes;
  const long long seam_out = seam, n_decode = e.n_decode;
  nlohmann::ordered_json out;
  out["device"] = device_name(model->device());
  out["prompts"] = e.prompts.size();
  out["seam"] = seam_out;
  out["decode_tokens"] = n_decode;
  for (auto m : modes) {
    ModeStats& s = stats[m];
    std::sort(s.ttft.begin(), s.ttft.end());
    const double n = s.n;
    nlohmann::ordered_json j;
    j["top1_agree"] = s.top1 / n;
    j["kl_mean"] = s.kl / n;
    j["greedy_match"] = s.greedy / n;
    j["exact_match"] = s.with_answer ? nlohmann::ordered_json(static_cast<double>(s.exact) / s.with_answer)
                                     : nlohmann::ordered_json(nullptr);
    j["computed_tokens_mean"] = s.computed / n;
    j["ttft_ms_p50"] = s.ttft[(s.ttft.size() - 1) / 2];
    j["prompt_tokens_mean"] = s.prompt_tokens / n;
    j["block_hit_rate"] = s.blocks ? static_cast<double>(s.block_hits) / s.blocks : 0.0;
    out["modes"][mode_name(m)] = j;
  }
  std::cout << out.dump(2) << "\n";
  return 0;
}

Registrar reg("eval-pic", "compare cache modes (full, prefix, hypic, naive, noseam) on a prompt set", [](CLI::App& app) {
  auto o = std::make_shared<Options>();
  add_model_options(app, o->model);
  app.add_option("--prompts", o->prompts, "JSONL, one {\"blocks\": [\"text\", ...], \"answer\": \"...\"} per line")
      ->required();
  app.add_option("--modes", o->modes, "comma-separated cache modes compared with full")
      ->check(CLI::Validator(check_modes, "MODE,...", "cache modes"));
  tools::add_int(app, "--seam", o->seam, "seam width (tokens recomputed at the start of a reused block)", 0LL, 65536LL);
  tools::add_int(app, "--decode-tokens", o->decode_tokens, "greedy tokens decoded per prompt and mode", 1LL, 65536LL);
  tools::add_int(app, "--cache-mb", o->cache_mb, "segment store budget per mode, in MiB", 1LL, 1LL << 24);
  app.add_flag("--prewarm", o->prewarm, "warm every mode's store with all prompts first");
  tools::add_int(app, "--show", o->show, "print the first N prompts' answers per mode to stderr", 0LL, 1LL << 40);
  return [o] { return run(*o); };
});

}  // namespace
}  // namespace hypic::cli
