// YAML template loader + compiler. The input is a template, optionally followed by a line "#vars" and
// a JSON object of variables; includes resolve inside a scratch folder holding one harmless part.
#include "dsl/compiler.h"
#include "dsl/errors.h"
#include "dsl/template.h"
#include "runtime/error.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string root = [] {
    const std::string d = hypic::fuzz::scratch_dir();
    hypic::fuzz::write_file(d + "/part.yaml", "vars:\n  p: {type: string, default: x}\nblocks:\n  - {id: p, role: system, text: \"{{p}}\"}\n");
    return d;
  }();
  const std::string_view in = hypic::fuzz::as_text(data, size);
  const size_t cut = in.find("\n#vars\n");
  const std::string_view yaml = in.substr(0, cut);
  hypic::dsl::Json vars = hypic::dsl::Json::object();
  if (cut != std::string_view::npos) {
    vars = hypic::dsl::Json::parse(in.substr(cut + 7), nullptr, false);
    if (vars.is_discarded()) return 0;
  }
  try {
    const hypic::dsl::Template t = hypic::dsl::parse_template(std::string(yaml), root + "/fuzz.yaml");
    hypic::dsl::compile(t, vars, hypic::dsl::CompileOptions{});
  } catch (const hypic::Error&) {  // TemplateError, VariableError, InjectionError, IncludeError, IoError
  }
  return 0;
}
