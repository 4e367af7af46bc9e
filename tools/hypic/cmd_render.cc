// `hypic render`: compile a prompt template and print its plan. The --vars file holds one variables
// object (one plan, printed as a JSON object) or an array of them, as `hypic run` takes (one plan per
// element, printed as a JSON array).
#include <cstdio>
#include <filesystem>
#include <memory>

#include "dsl/compiler.h"
#include "dsl/hf_plan_tokenizer.h"
#include "runtime/cpu_backend.h"
#include "runtime/text/chat_format.h"
#include "tools/hypic/cli_args.h"

namespace {

struct Options {
  std::string template_path, vars, model_dir, chat_template, template_root;
  long long seam_width = 8;
  bool full = false;
};

// The plan as printed: every field with --full, else the fields a reader checks.
hypic::dsl::Json plan_json(const hypic::dsl::PromptPlan& plan, bool full_plan) {
  using hypic::dsl::Json;
  Json full = plan.to_json();
  if (full_plan) return full;
  Json out;
  out["blocks"] = Json::array();
  for (const auto& b : full["blocks"]) {
    Json e;
    for (const char* k : {"id", "role", "text", "tokens", "content_key", "chain_key", "cache", "order", "source"})
      e[k] = b[k];
    out["blocks"].push_back(std::move(e));
  }
  out["generation_prompt"] = full["generation_prompt"];
  out["reusable_prefix"] = full["reusable_prefix"];
  out["lint"] = full["lint"];
  return out;
}

int run(const Options& o) {
  using namespace hypic;
  dsl::LoadOptions load;
  load.template_root = o.template_root;
  const dsl::Template tpl = dsl::load_template(o.template_path, load);
  dsl::Json vars = dsl::Json::object();
  dsl::CompileOptions opt;
  if (!o.vars.empty()) vars = dsl::load_variables(o.vars);
  opt.seam_width = static_cast<int>(o.seam_width);

  std::unique_ptr<Tokenizer> tok;
  std::unique_ptr<dsl::HfPlanTokenizer> plan_tok;
  // The plan is framed in the model's chat format (or the named template's); without either, Qwen3's.
  std::unique_ptr<ChatFormat> format;
  if (!o.model_dir.empty() || !o.chat_template.empty()) {
    format = load_chat_format(o.model_dir, o.chat_template);
    opt.format = format.get();
  }
  if (!o.model_dir.empty()) {
    const std::string& dir = o.model_dir;
    tok = std::make_unique<Tokenizer>(Tokenizer::from_file((std::filesystem::path(dir) / "tokenizer.json").string()));
    plan_tok = std::make_unique<dsl::HfPlanTokenizer>(*tok);
    // The engine keys segments by the loaded weights' fingerprint; use the same one.
    opt.model_fingerprint = CpuBackend::load(dir)->fingerprint();
    opt.tokenizer = plan_tok.get();
  }
  dsl::Json out;
  if (vars.is_array()) {
    out = dsl::Json::array();
    for (size_t i = 0; i < vars.size(); ++i) {
      opt.vars_source = o.vars + "[" + std::to_string(i) + "]";  // errors name the element
      out.push_back(plan_json(dsl::compile(tpl, vars[i], opt), o.full));
    }
  } else {
    opt.vars_source = o.vars;
    out = plan_json(dsl::compile(tpl, vars, opt), o.full);
  }
  std::printf("%s\n", out.dump(2).c_str());
  return 0;
}

const hypic::cli::Registrar kRender("render", "compile a prompt template with variables and print the plan as JSON",
                                    [](CLI::App& app) {
  auto o = std::make_shared<Options>();
  app.add_option("TEMPLATE", o->template_path, "the YAML template")->required();
  app.add_option("--vars", o->vars, "variables: one JSON/YAML object (one plan) or an array of them (one plan each)");
  app.add_option("--template-root", o->template_root,
                 "folder that the template's includes may reach (default: the template's own folder)")
      ->check(CLI::ExistingDirectory);
  app.add_option("--model-dir", o->model_dir, "tokenize the blocks and key them with this model's tokenizer and weights");
  app.add_option("--chat-template", o->chat_template,
                 "frame the plan in this Jinja chat template's format (default: the model's, else Qwen3's)");
  hypic::tools::add_int(app, "--seam-width", o->seam_width, "seam width the plan's keys assume", 0LL, 65536LL);
  app.add_flag("--full", o->full, "print every field of the plan");
  return [o] { return run(*o); };
});

}  // namespace
