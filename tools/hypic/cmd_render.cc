// hypic render TEMPLATE.yaml --vars F.json [--model-dir DIR]: compile a prompt template and print its plan.
#include <cstdio>
#include <filesystem>
#include <memory>

#include "dsl/compiler.h"
#include "dsl/hf_plan_tokenizer.h"
#include "runtime/cpu_backend.h"
#include "runtime/text/chat_format.h"
#include "tools/hypic/cli_args.h"

namespace {

int run_render(int argc, char** argv) {
  using namespace hypic;
  const cli::Args args(argc, argv, {"full"});
  args.allow_only({"vars", "model-dir", "seam-width", "full", "chat-template"});
  if (args.positionals().size() != 1)
    throw cli::UsageError(
        "usage: hypic render TEMPLATE.yaml [--vars F.json] [--model-dir DIR] [--chat-template FILE] [--seam-width N] "
        "[--full]");
  const std::string template_path = args.positionals()[0];
  const dsl::Template tpl = dsl::load_template(template_path);
  dsl::Json vars = dsl::Json::object();
  dsl::CompileOptions opt;
  if (args.has("vars")) {
    opt.vars_source = args.get("vars", "");
    vars = dsl::load_variables(opt.vars_source);
  }
  opt.seam_width = int(args.get_int("seam-width", 8));
  if (opt.seam_width < 0) throw cli::UsageError("--seam-width must be >= 0");

  std::unique_ptr<Tokenizer> tok;
  std::unique_ptr<dsl::HfPlanTokenizer> plan_tok;
  // The plan is framed in the model's chat format (or the named template's); without either, Qwen3's.
  std::unique_ptr<ChatFormat> format;
  const std::string chat_template = args.get("chat-template", "");
  if (args.has("model-dir") || !chat_template.empty()) {
    format = load_chat_format(args.get("model-dir", ""), chat_template);
    opt.format = format.get();
  }
  if (args.has("model-dir")) {
    const std::string dir = args.get("model-dir", "");
    tok = std::make_unique<Tokenizer>(Tokenizer::from_file((std::filesystem::path(dir) / "tokenizer.json").string()));
    plan_tok = std::make_unique<dsl::HfPlanTokenizer>(*tok);
    // The engine keys segments by the loaded weights' fingerprint; use the same one.
    opt.model_fingerprint = CpuBackend::load(dir)->fingerprint();
    opt.tokenizer = plan_tok.get();
  }
  const dsl::PromptPlan plan = dsl::compile(tpl, vars, opt);
  dsl::Json full = plan.to_json();
  dsl::Json out;
  if (args.has("full")) {
    out = std::move(full);
  } else {
    out["blocks"] = dsl::Json::array();
    for (const auto& b : full["blocks"]) {
      dsl::Json e;
      for (const char* k : {"id", "role", "text", "tokens", "content_key", "chain_key", "cache", "order", "source"})
        e[k] = b[k];
      out["blocks"].push_back(std::move(e));
    }
    out["generation_prompt"] = full["generation_prompt"];
    out["reusable_prefix"] = full["reusable_prefix"];
    out["lint"] = full["lint"];
  }
  std::printf("%s\n", out.dump(2).c_str());
  return 0;
}

const hypic::cli::Registrar kRender("render", "compile a prompt template with variables and print the plan as JSON",
                                    run_render);

}  // namespace
