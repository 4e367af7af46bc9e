// Template + variables -> PromptPlan. All or nothing: returns a complete plan or throws.
#pragma once
#include <string>

#include "dsl/plan_tokenizer.h"
#include "dsl/prompt_plan.h"
#include "dsl/template.h"
#include "runtime/text/chat_format.h"

namespace hypic::dsl {

struct CompileOptions {
  const ChatFormat* format = nullptr;        // the model's chat format; null: default_chat_format()
  const PlanTokenizer* tokenizer = nullptr;  // null: tokens and keys stay empty
  std::string model_fingerprint;             // goes into the content keys
  int seam_width = 8;
  std::string vars_source = "variables";  // names the variables in error messages, e.g. "vars.json"
};

// Throws VariableError (missing, undeclared, wrong type, missing field), InjectionError, TemplateError.
PromptPlan compile(const Template& tpl, const Json& vars, const CompileOptions& options = {});

// Variables as JSON, from a file: throws IoError / FormatError naming the file.
Json load_variables(const std::string& path);

}  // namespace hypic::dsl
