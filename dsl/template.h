// A loaded prompt template: declared variables, tools, blocks and agent settings, every piece with the
// file position it came from. docs/template_format.md describes the YAML format.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "dsl/errors.h"
#include "dsl/markup.h"
#include "dsl/text_template.h"

namespace hypic::dsl {

enum class VarType { kString, kNumber, kBool, kList, kObject };
const char* var_type_name(VarType t);

struct VarDecl {
  std::string name;
  VarType type = VarType::kString;
  std::optional<VarType> items;  // element type of a list, when declared
  bool required = true;          // false exactly when a default is given
  Json default_value;            // null when required
  bool is_volatile = false;      // changes per request (question, timestamp): lints as volatile
  MarkupPolicy markup = MarkupPolicy::kReject;
  std::string description;
  SourceLocation loc;
};

struct ToolDecl {
  std::string name;
  std::string description;
  Json parameters;  // a JSON schema with "type": "object"
  SourceLocation loc;
};

enum class CachePolicy { kPin, kCache, kNone };
enum class BlockOrder { kFixed, kFree };
const char* cache_policy_name(CachePolicy p);
// Whether a JSON value has the declared type (json_type_name, in text_template.h, names a value's type).
bool value_fits(VarType t, const Json& v);
const char* block_order_name(BlockOrder o);

struct BlockDecl {
  enum class Kind { kText, kTools, kHistory };
  std::string id;
  Kind kind = Kind::kText;
  std::string role;  // system | user | assistant | tool (kText); "system" for kTools
  TextTemplate text;
  // Repetition: one block per element of the list variable `for_each`, bound to `loop_name`.
  std::vector<std::string> for_each;
  std::string loop_name;
  std::optional<TextTemplate> key;  // per-element id; default: a hash of the element's text
  std::vector<std::string> tools;   // kTools: names, in order
  std::string history;              // kHistory: the list variable holding the messages
  CachePolicy cache = CachePolicy::kCache;
  BlockOrder order = BlockOrder::kFixed;
  bool is_volatile = false;
  bool join = false;  // continues the previous block's message (same role) instead of starting one
  SourceLocation loc;
};

struct AgentSettings {
  int max_steps = 8;
  std::string tool_choice = "auto";  // auto | none | required | a declared tool's name
  std::vector<std::string> stop;
  std::optional<int> max_tokens;
  std::optional<double> temperature;
  std::optional<double> top_p;
  std::optional<int> top_k;
  std::optional<double> presence_penalty;    // [-2, 2], OpenAI's definitions (sdk::GenerateOptions)
  std::optional<double> frequency_penalty;   // [-2, 2]
  std::optional<double> repetition_penalty;  // (0, 2], 1 is off
  std::optional<uint64_t> seed;
  std::optional<bool> thinking;  // false: the generation prompt closes an empty reasoning section
};

struct Template {
  std::string name;
  std::string file;  // the root file
  std::vector<VarDecl> vars;
  std::vector<ToolDecl> tools;
  std::vector<BlockDecl> blocks;  // includes spliced in place
  AgentSettings agent;
  std::vector<std::string> files;  // every file read, root first

  const VarDecl* find_var(const std::string& name) const;
  const ToolDecl* find_tool(const std::string& name) const;
};

// Limits that keep a hostile template from reading arbitrary files, blocking, or exhausting memory.
struct LoadOptions {
  // Includes must resolve (symlinks followed) to files under this folder; empty: the root template's folder.
  std::string template_root;
  size_t max_file_bytes = size_t{4} << 20;  // per template file
  size_t max_includes = 256;                // include directives followed, in all
  size_t max_yaml_values = 100000;           // YAML nodes turned into values (defaults, schemas), aliases counted
};

// Reads `path` and its includes. Throws TemplateError (or IncludeError) naming file:line:column; IoError
// when `path` is missing, not a regular file or too large.
Template load_template(const std::string& path, const LoadOptions& options = {});
// Same, from text; includes resolve relative to the directory of `file_name`.
Template parse_template(const std::string& yaml_text, const std::string& file_name, const LoadOptions& options = {});

}  // namespace hypic::dsl
