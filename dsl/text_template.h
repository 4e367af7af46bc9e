// The block text language: a small, strict mustache-like syntax.
//   {{name}}  {{name.field}}  {{name.0}}        substitute a string, number or bool (escaped per variable)
//   {{#each list as item}} ... {{/each}}        repeat over a list; `item` is bound inside
//   {{#if path}} ... {{else}} ... {{/if}}       bool: its value; string/list/object: non-empty
//   {{! comment }}                              dropped
//   \{{                                         a literal "{{"
// A line holding only a section tag or comment disappears entirely (mustache "standalone" rule).
#pragma once
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "dsl/errors.h"
#include "dsl/markup.h"

namespace hypic::dsl {

using Json = nlohmann::ordered_json;

// The name of a JSON value's type in messages: null, bool, number, string, list, object.
const char* json_type_name(const Json& v);

// Where a YAML scalar's text starts in its file, to turn offsets in the text into file positions.
struct TextOrigin {
  std::string file;
  int line = 1;          // 1-based line of the first character of the text
  int column = 1;        // 1-based column of the first character of the text
  bool block_scalar = false;  // `|` / `>`: text line k is file line `line + k` at column `column`
};

struct TemplateNode {
  enum class Kind { kText, kVar, kEach, kIf };
  Kind kind = Kind::kText;
  std::string text;               // kText
  std::vector<std::string> path;  // kVar / kEach list / kIf condition
  std::string loop_name;          // kEach
  std::vector<TemplateNode> body;
  std::vector<TemplateNode> else_body;  // kIf
  SourceLocation loc;
};

class TextTemplate {
 public:
  TextTemplate() = default;
  // Throws TemplateError (with the position of the offending tag) on a syntax error.
  static TextTemplate parse(std::string_view source, const TextOrigin& origin, const std::string& block);

  const std::vector<TemplateNode>& nodes() const { return nodes_; }
  const SourceLocation& location() const { return loc_; }
  bool empty() const { return nodes_.empty(); }

 private:
  std::vector<TemplateNode> nodes_;
  SourceLocation loc_;
};

// Every path whose root is not a loop name: the variables a template reads, with where it reads them.
struct VariableUse {
  std::vector<std::string> path;
  SourceLocation loc;
};
std::vector<VariableUse> variable_uses(const TextTemplate& t);

// A name visible while rendering: a declared variable or a loop element.
struct Binding {
  std::string name;
  const Json* value = nullptr;
  MarkupPolicy markup = MarkupPolicy::kReject;
  std::string variable;  // the declared variable it comes from, for messages
};

struct RenderEnv {
  std::vector<Binding> bindings;              // searched innermost (last) first
  std::vector<std::string> extra_markers;     // the chat format's reserved markers
  // Byte ranges of the output that `markup: raw` variables inserted (the only places markup may be).
  std::vector<std::pair<size_t, size_t>> raw_ranges;
  std::string block;                          // for error messages
  std::string vars_source;                    // e.g. "vars.json", for error messages
};

// Renders all or nothing: throws VariableError / InjectionError naming the use site.
std::string render(const TextTemplate& t, RenderEnv& env);

// Applies a markup policy to one string coming from variable `variable`; throws InjectionError.
std::string apply_markup_policy(std::string_view text, MarkupPolicy policy, const std::string& variable,
                                const std::vector<std::string>& extra, const SourceLocation& loc,
                                const std::string& block, const std::string& vars_source);

std::string path_string(const std::vector<std::string>& path);

}  // namespace hypic::dsl
