// Building a prompt template in C++ instead of YAML. The builder writes the same YAML document a
// user would and compiles it with the DSL's own loader, so both paths share every check and error.
//
//   auto tpl = sdk::TemplateBuilder("qa")
//                  .var("question", "string", {.volatile_ = true})
//                  .var("docs", "list", {.default_ = sdk::Json::array()})
//                  .tool(sdk::calculator_tool())
//                  .system("system", "You answer from the documents.", "pin")
//                  .tools_block()
//                  .repeat("doc", "docs", "d", "{{d}}")
//                  .user("question", "{{question}}", "none")
//                  .max_steps(4)
//                  .build();
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "dsl/template.h"
#include "sdk/tool.h"

namespace hypic::sdk {

struct VarOptions {
  std::optional<Json> default_;    // makes the variable optional
  bool volatile_ = false;          // per-query value: the lint wants it after the stable blocks
  std::string markup = "reject";   // reject | neutralize | raw
  std::string items;               // element type of a list
};

class TemplateBuilder {
 public:
  explicit TemplateBuilder(std::string name);

  TemplateBuilder& var(const std::string& name, const std::string& type, const VarOptions& opt = {});
  TemplateBuilder& tool(const Tool& t);  // declares the tool (name, description, parameters)
  TemplateBuilder& system(const std::string& id, const std::string& text, const std::string& cache = "cache");
  TemplateBuilder& user(const std::string& id, const std::string& text, const std::string& cache = "cache");
  TemplateBuilder& tools_block(const std::string& id = "tools");
  // One block per element of list `list_var`, bound to `as`; order free (chunks may be reordered).
  TemplateBuilder& repeat(const std::string& id, const std::string& list_var, const std::string& as,
                          const std::string& text, const std::string& role = "user");
  TemplateBuilder& history(const std::string& id, const std::string& list_var);
  TemplateBuilder& max_steps(int n);
  TemplateBuilder& max_tokens(int n);
  TemplateBuilder& sampling(double temperature, double top_p = 1.0, int top_k = 0, uint64_t seed = 0);
  // The agent's presence and frequency penalties ([-2, 2]) and repetition penalty ((0, 2], 1 is off).
  TemplateBuilder& penalties(double presence, double frequency, double repetition = 1.0);

  std::string yaml() const;  // the equivalent YAML template
  // Throws the DSL's TemplateError (location in "<builder:NAME>") for an invalid template.
  dsl::Template build() const;

 private:
  std::string name_;
  Json vars_ = Json::object();
  Json tools_ = Json::array();
  Json blocks_ = Json::array();
  Json agent_ = Json::object();
};

}  // namespace hypic::sdk
