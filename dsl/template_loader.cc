// YAML -> Template, with includes, strict keys and file:line:column on every error.
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "runtime/text/chat_format.h"
#include "dsl/template.h"
#include "runtime/regular_file.h"

namespace hypic::dsl {
namespace fs = std::filesystem;

const char* var_type_name(VarType t) {
  switch (t) {
    case VarType::kString: return "string";
    case VarType::kNumber: return "number";
    case VarType::kBool: return "bool";
    case VarType::kList: return "list";
    case VarType::kObject: return "object";
  }
  return "?";
}

bool value_fits(VarType t, const Json& v) {
  switch (t) {
    case VarType::kString: return v.is_string();
    case VarType::kNumber: return v.is_number();
    case VarType::kBool: return v.is_boolean();
    case VarType::kList: return v.is_array();
    case VarType::kObject: return v.is_object();
  }
  return false;
}

const char* cache_policy_name(CachePolicy p) {
  switch (p) {
    case CachePolicy::kPin: return "pin";
    case CachePolicy::kCache: return "cache";
    case CachePolicy::kNone: return "none";
  }
  return "?";
}

const char* block_order_name(BlockOrder o) { return o == BlockOrder::kFree ? "free" : "fixed"; }

const VarDecl* Template::find_var(const std::string& name) const {
  for (const auto& v : vars)
    if (v.name == name) return &v;
  return nullptr;
}

const ToolDecl* Template::find_tool(const std::string& name) const {
  for (const auto& t : tools)
    if (t.name == name) return &t;
  return nullptr;
}

namespace {

// One file being loaded: its text (for scalar positions) and its name (for messages).
struct File {
  std::string name;
  std::string text;
};

class Loader {
 public:
  explicit Loader(const LoadOptions& options) : options_(options) {}

  Template load_root(const std::string& text, const std::string& file_name) {
    tpl_.file = file_name;
    // Includes may only reach files under this folder (symlinks resolved), never `../` or absolute paths
    // elsewhere: a template must not be able to render arbitrary files into a prompt.
    const fs::path root = options_.template_root.empty() ? fs::path(file_name).parent_path()
                                                         : fs::path(options_.template_root);
    std::error_code ec;
    root_ = fs::weakly_canonical(fs::absolute(root.empty() ? fs::path(".") : root, ec), ec);
    if (text.size() > options_.max_file_bytes)
      throw TemplateError({file_name, 0, 0}, "", "template is " + std::to_string(text.size()) +
                                                     " bytes, more than the limit of " +
                                                     std::to_string(options_.max_file_bytes));
    load_file(File{file_name, text}, true, {file_name, 0, 0});
    finish();
    return std::move(tpl_);
  }

 private:
  SourceLocation at(const File& f, const YAML::Node& n) const {
    const YAML::Mark m = n.Mark();
    if (m.line < 0) return {f.name, 0, 0};
    return {f.name, m.line + 1, m.column + 1};
  }

  [[noreturn]] void fail(const File& f, const YAML::Node& n, const std::string& block, const std::string& msg) const {
    throw TemplateError(at(f, n), block, msg);
  }

  void load_file(const File& f, bool is_root, const SourceLocation& included_from) {
    stack_.push_back(f.name);
    tpl_.files.push_back(f.name);
    YAML::Node root;
    try {
      root = YAML::Load(f.text);
    } catch (const YAML::Exception& e) {
      throw TemplateError({f.name, e.mark.line + 1, e.mark.column + 1}, "", "bad YAML: " + e.msg);
    }
    if (!root.IsMap()) {
      if (root.IsNull()) throw TemplateError({f.name, 1, 1}, "", "empty template (expected a mapping with `blocks:`)");
      fail(f, root, "", "a template is a mapping with keys name, description, vars, tools, agent, blocks");
    }
    check_keys(f, root, "", {"name", "description", "vars", "tools", "agent", "blocks"});
    if (root["name"]) {
      if (is_root) tpl_.name = scalar(f, root["name"], "", "name");
      else scalar(f, root["name"], "", "name");
    }
    if (root["description"]) scalar(f, root["description"], "", "description");
    if (root["vars"]) load_vars(f, root["vars"]);
    if (root["tools"]) load_tools(f, root["tools"]);
    if (root["agent"]) {
      if (!is_root) fail(f, root["agent"], "", "agent settings belong in the root template, not in an include");
      load_agent(f, root["agent"]);
    }
    if (root["blocks"]) {
      const YAML::Node blocks = root["blocks"];
      if (!blocks.IsSequence()) fail(f, blocks, "", "`blocks` must be a list");
      for (const auto& b : blocks) load_block(f, b);
    } else if (is_root) {
      throw TemplateError({f.name, 1, 1}, "", "template has no `blocks`");
    }
    (void)included_from;
    stack_.pop_back();
  }

  void check_keys(const File& f, const YAML::Node& map, const std::string& block, std::set<std::string> allowed) {
    std::set<std::string> seen;
    for (const auto& kv : map) {
      const std::string k = kv.first.Scalar();
      if (!seen.insert(k).second) fail(f, kv.first, block, "duplicate key '" + k + "'");
      if (!allowed.count(k)) {
        std::string list;
        for (const auto& a : allowed) list += (list.empty() ? "" : ", ") + a;
        fail(f, kv.first, block, "unknown key '" + k + "' (allowed: " + list + ")");
      }
    }
  }

  std::string scalar(const File& f, const YAML::Node& n, const std::string& block, const std::string& what) {
    if (!n.IsScalar()) fail(f, n, block, "`" + what + "` must be a string");
    return n.Scalar();
  }

  bool boolean(const File& f, const YAML::Node& n, const std::string& block, const std::string& what) {
    if (n.IsScalar() && n.Tag() != "!") {
      if (n.Scalar() == "true") return true;
      if (n.Scalar() == "false") return false;
    }
    fail(f, n, block, "`" + what + "` must be true or false");
  }

  long long integer(const File& f, const YAML::Node& n, const std::string& block, const std::string& what,
                    long long lo, long long hi) {
    if (n.IsScalar() && n.Tag() != "!") {
      const std::string& s = n.Scalar();
      try {
        size_t used = 0;
        const long long v = std::stoll(s, &used);
        if (used == s.size() && v >= lo && v <= hi) return v;
      } catch (const std::exception&) {
      }
    }
    fail(f, n, block, "`" + what + "` must be an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  }

  double number(const File& f, const YAML::Node& n, const std::string& block, const std::string& what, double lo,
                double hi) {
    if (n.IsScalar() && n.Tag() != "!") {
      const std::string& s = n.Scalar();
      try {
        size_t used = 0;
        const double v = std::stod(s, &used);
        if (used == s.size() && v >= lo && v <= hi) return v;
      } catch (const std::exception&) {
      }
    }
    std::ostringstream r;
    r << "`" << what << "` must be a number in [" << lo << ", " << hi << "]";
    fail(f, n, block, r.str());
  }

  // YAML -> JSON: plain scalars become numbers, bools or null where they read as such; quoted stay strings.
  // YAML aliases share one node, so a few lines can stand for billions of values (an alias bomb): every
  // value converted counts against one budget for the whole template, and nesting is bounded.
  Json to_json(const File& f, const YAML::Node& n, int depth = 0) {
    if (++converted_ > options_.max_yaml_values)
      fail(f, n, "", "the template's values expand to more than " + std::to_string(options_.max_yaml_values) +
                         " YAML nodes (aliases repeated too often?)");
    if (depth > kMaxValueDepth)
      fail(f, n, "", "a value is nested more than " + std::to_string(kMaxValueDepth) + " levels deep");
    if (n.IsNull()) return nullptr;
    if (n.IsSequence()) {
      Json a = Json::array();
      for (const auto& e : n) a.push_back(to_json(f, e, depth + 1));
      return a;
    }
    if (n.IsMap()) {
      Json o = Json::object();
      for (const auto& kv : n) o[kv.first.Scalar()] = to_json(f, kv.second, depth + 1);
      return o;
    }
    const std::string& s = n.Scalar();
    if (n.Tag() == "!") return s;
    if (s == "true") return true;
    if (s == "false") return false;
    if (s == "null" || s == "~") return nullptr;
    // Only what can start a number goes to stoll/stod (their exceptions are slow on word-heavy YAML).
    if (s.empty() || s[0] == 0 || !std::strchr("0123456789+-. \t\n\r\f\v", s[0])) return s;
    try {
      size_t used = 0;
      const long long v = std::stoll(s, &used);
      if (used == s.size()) return v;
    } catch (const std::exception&) {
    }
    try {
      size_t used = 0;
      const double v = std::stod(s, &used);
      if (used == s.size() && !s.empty() && (std::isdigit(static_cast<unsigned char>(s[0])) || s[0] == '-' || s[0] == '.'))
        return v;
    } catch (const std::exception&) {
    }
    return s;
  }

  VarType parse_type(const File& f, const YAML::Node& n, const std::string& what) {
    const std::string s = scalar(f, n, "", what);
    if (s == "string") return VarType::kString;
    if (s == "number") return VarType::kNumber;
    if (s == "bool") return VarType::kBool;
    if (s == "list") return VarType::kList;
    if (s == "object") return VarType::kObject;
    fail(f, n, "", "unknown type '" + s + "' (types: string, number, bool, list, object)");
  }

  void load_vars(const File& f, const YAML::Node& vars) {
    if (!vars.IsMap()) fail(f, vars, "", "`vars` must be a mapping from variable name to declaration");
    std::set<std::string> seen;
    for (const auto& kv : vars) {
      VarDecl d;
      d.name = kv.first.Scalar();
      d.loc = at(f, kv.first);
      if (!seen.insert(d.name).second) fail(f, kv.first, "", "duplicate variable '" + d.name + "'");
      if (!is_name(d.name)) fail(f, kv.first, "", "bad variable name '" + d.name + "' (letters, digits, _)");
      const YAML::Node spec = kv.second;
      if (spec.IsScalar()) {
        d.type = parse_type(f, spec, "type");  // shorthand `name: string` declares a required variable
      } else if (spec.IsMap()) {
        check_keys(f, spec, "", {"type", "default", "required", "volatile", "markup", "items", "description"});
        if (!spec["type"]) fail(f, spec, "", "variable '" + d.name + "' needs a `type`");
        d.type = parse_type(f, spec["type"], "type");
        if (spec["items"]) {
          if (d.type != VarType::kList) fail(f, spec["items"], "", "`items` is only for list variables");
          d.items = parse_type(f, spec["items"], "items");
        }
        if (spec["default"]) {
          d.default_value = to_json(f, spec["default"]);
          if (d.type == VarType::kString && spec["default"].IsScalar()) d.default_value = spec["default"].Scalar();
          if (!value_fits(d.type, d.default_value))
            fail(f, spec["default"], "",
                 "default of variable '" + d.name + "' is not a " + var_type_name(d.type));
          d.required = false;
        }
        if (spec["required"]) {
          const bool req = boolean(f, spec["required"], "", "required");
          if (req && !d.required) fail(f, spec["required"], "", "variable '" + d.name + "' is required but has a default");
          if (!req && d.required) fail(f, spec["required"], "", "optional variable '" + d.name + "' needs a `default`");
        }
        if (spec["volatile"]) d.is_volatile = boolean(f, spec["volatile"], "", "volatile");
        if (spec["markup"]) {
          const std::string m = scalar(f, spec["markup"], "", "markup");
          if (m == "reject") d.markup = MarkupPolicy::kReject;
          else if (m == "neutralize") d.markup = MarkupPolicy::kNeutralize;
          else if (m == "raw") d.markup = MarkupPolicy::kRaw;
          else fail(f, spec["markup"], "", "`markup` must be reject, neutralize or raw");
        }
        if (spec["description"]) d.description = scalar(f, spec["description"], "", "description");
      } else {
        fail(f, spec, "", "variable '" + d.name + "': expected a type name or a mapping");
      }
      if (const VarDecl* prev = tpl_.find_var(d.name)) {
        if (prev->type != d.type || prev->default_value != d.default_value || prev->markup != d.markup)
          fail(f, kv.first, "", "variable '" + d.name + "' is already declared differently at " + prev->loc.str());
        continue;
      }
      tpl_.vars.push_back(std::move(d));
    }
  }

  void load_tools(const File& f, const YAML::Node& tools) {
    if (!tools.IsSequence()) fail(f, tools, "", "`tools` must be a list of {name, description, parameters}");
    for (const auto& t : tools) {
      if (!t.IsMap()) fail(f, t, "", "a tool is a mapping {name, description, parameters}");
      check_keys(f, t, "", {"name", "description", "parameters"});
      ToolDecl d;
      d.loc = at(f, t);
      if (!t["name"]) fail(f, t, "", "tool needs a `name`");
      d.name = scalar(f, t["name"], "", "name");
      if (!is_tool_name(d.name)) fail(f, t["name"], "", "bad tool name '" + d.name + "' (letters, digits, _ . -)");
      if (t["description"]) d.description = scalar(f, t["description"], "", "description");
      if (t["parameters"]) {
        if (!t["parameters"].IsMap()) fail(f, t["parameters"], "", "tool `parameters` must be a JSON schema object");
        d.parameters = to_json(f, t["parameters"]);
        if (!d.parameters.contains("type") || d.parameters["type"] != "object")
          fail(f, t["parameters"], "", "tool `parameters` must be a schema with `type: object`");
      } else {
        d.parameters = Json{{"type", "object"}, {"properties", Json::object()}};
      }
      if (const ToolDecl* prev = tpl_.find_tool(d.name)) {
        if (prev->description != d.description || prev->parameters != d.parameters)
          fail(f, t["name"], "", "tool '" + d.name + "' is already declared differently at " + prev->loc.str());
        continue;
      }
      tpl_.tools.push_back(std::move(d));
    }
  }

  void load_agent(const File& f, const YAML::Node& a) {
    if (!a.IsMap()) fail(f, a, "", "`agent` must be a mapping");
    check_keys(f, a, "",
               {"max_steps", "tool_choice", "stop", "max_tokens", "temperature", "top_p", "top_k", "presence_penalty",
                "frequency_penalty", "repetition_penalty", "seed", "thinking"});
    AgentSettings& s = tpl_.agent;
    if (a["max_steps"]) s.max_steps = int(integer(f, a["max_steps"], "", "max_steps", 1, 1000));
    if (a["tool_choice"]) {
      s.tool_choice = scalar(f, a["tool_choice"], "", "tool_choice");
      tool_choice_node_ = a["tool_choice"];
      tool_choice_file_ = f;
      has_tool_choice_ = true;
    }
    if (a["stop"]) {
      const YAML::Node st = a["stop"];
      if (st.IsScalar()) s.stop.push_back(st.Scalar());
      else if (st.IsSequence())
        for (const auto& e : st) s.stop.push_back(scalar(f, e, "", "stop"));
      else fail(f, st, "", "`stop` must be a string or a list of strings");
      for (const auto& x : s.stop)
        if (x.empty()) fail(f, st, "", "`stop` strings must not be empty");
    }
    if (a["max_tokens"]) s.max_tokens = int(integer(f, a["max_tokens"], "", "max_tokens", 1, 1 << 24));
    if (a["temperature"]) s.temperature = number(f, a["temperature"], "", "temperature", 0.0, 100.0);
    if (a["top_p"]) {
      s.top_p = number(f, a["top_p"], "", "top_p", 0.0, 1.0);
      if (*s.top_p <= 0.0) fail(f, a["top_p"], "", "`top_p` must be in (0, 1]");
    }
    if (a["top_k"]) s.top_k = int(integer(f, a["top_k"], "", "top_k", 0, 1 << 24));
    if (a["presence_penalty"]) s.presence_penalty = number(f, a["presence_penalty"], "", "presence_penalty", -2.0, 2.0);
    if (a["frequency_penalty"])
      s.frequency_penalty = number(f, a["frequency_penalty"], "", "frequency_penalty", -2.0, 2.0);
    if (a["repetition_penalty"]) {
      s.repetition_penalty = number(f, a["repetition_penalty"], "", "repetition_penalty", 0.0, 2.0);
      if (*s.repetition_penalty <= 0.0)
        fail(f, a["repetition_penalty"], "", "`repetition_penalty` must be in (0, 2]");
    }
    if (a["seed"]) s.seed = uint64_t(integer(f, a["seed"], "", "seed", 0, (1LL << 62)));
    if (a["thinking"]) s.thinking = boolean(f, a["thinking"], "", "thinking");
  }

  TextTemplate text_of(const File& f, const YAML::Node& n, const std::string& block, const std::string& what) {
    const std::string s = scalar(f, n, block, what);
    TextOrigin o;
    o.file = f.name;
    const YAML::Mark m = n.Mark();
    o.line = m.line + 1;
    o.column = m.column + 1;
    if (m.pos >= 0 && size_t(m.pos) < f.text.size()) {
      const char c = f.text[size_t(m.pos)];
      if (c == '|' || c == '>') {
        // Block scalar: the text starts on the next non-empty line, at that line's indentation.
        size_t p = f.text.find('\n', size_t(m.pos));
        int line = o.line + 1;
        while (p != std::string::npos) {
          const size_t start = p + 1;
          size_t q = start;
          while (q < f.text.size() && f.text[q] == ' ') ++q;
          if (q < f.text.size() && f.text[q] != '\n') {
            o.line = line;
            o.column = int(q - start) + 1;
            break;
          }
          p = f.text.find('\n', start);
          ++line;
        }
        o.block_scalar = true;
      } else if (c == '"' || c == '\'') {
        o.column += 1;
      }
    }
    return TextTemplate::parse(s, o, block);
  }

  std::vector<std::string> var_path(const File& f, const YAML::Node& n, const std::string& block, const std::string& what) {
    std::string s = scalar(f, n, block, what);
    // Accept both `chunks` and `"{{chunks}}"`.
    if (s.size() > 4 && s.rfind("{{", 0) == 0 && s.substr(s.size() - 2) == "}}") s = s.substr(2, s.size() - 4);
    while (!s.empty() && s.front() == ' ') s.erase(0, 1);
    while (!s.empty() && s.back() == ' ') s.pop_back();
    std::vector<std::string> path;
    std::stringstream ss(s);
    std::string part;
    while (std::getline(ss, part, '.')) {
      if (!is_name(part)) fail(f, n, block, "`" + what + "` must name a variable (name or name.field), got '" + s + "'");
      path.push_back(part);
    }
    if (path.empty()) fail(f, n, block, "`" + what + "` must name a variable");
    return path;
  }

  CachePolicy cache_policy(const File& f, const YAML::Node& n, const std::string& block) {
    const std::string s = scalar(f, n, block, "cache");
    if (s == "pin") return CachePolicy::kPin;
    if (s == "cache") return CachePolicy::kCache;
    if (s == "none") return CachePolicy::kNone;
    fail(f, n, block, "`cache` must be pin, cache or none, got '" + s + "'");
  }

  void load_block(const File& f, const YAML::Node& b) {
    if (!b.IsMap()) fail(f, b, "", "a block is a mapping (id, role, text, ...) or {include: FILE}");
    if (b["include"]) {
      check_keys(f, b, "", {"include"});
      include(f, b["include"]);
      return;
    }
    std::string id;
    if (b["id"]) id = scalar(f, b["id"], "", "id");
    else fail(f, b, "", "block needs an `id`");
    if (!is_block_id(id)) fail(f, b["id"], "", "bad block id '" + id + "' (letters, digits, _ -)");
    check_keys(f, b, id,
               {"id", "role", "text", "for_each", "as", "key", "tools", "history", "cache", "order", "volatile",
                "join"});
    for (const auto& other : tpl_.blocks)
      if (other.id == id) fail(f, b["id"], id, "duplicate block id (first at " + other.loc.str() + ")");
    BlockDecl d;
    d.id = id;
    d.loc = at(f, b);
    const int kinds = int(bool(b["text"])) + int(bool(b["tools"])) + int(bool(b["history"]));
    if (kinds != 1) fail(f, b, id, "a block has exactly one of `text`, `tools`, `history`");
    if (b["tools"]) {
      d.kind = BlockDecl::Kind::kTools;
      d.role = "system";
      d.cache = CachePolicy::kPin;
      for (const char* k : {"role", "for_each", "as", "key", "join"})
        if (b[k]) fail(f, b[k], id, std::string("a tools block takes no `") + k + "`");
      const YAML::Node t = b["tools"];
      tools_nodes_.push_back({t, f, id});
      if (t.IsScalar() && t.Scalar() == "all") {
        d.tools = {"*"};
      } else if (t.IsSequence()) {
        for (const auto& e : t) d.tools.push_back(scalar(f, e, id, "tools"));
      } else {
        fail(f, t, id, "`tools` must be `all` or a list of tool names");
      }
    } else if (b["history"]) {
      d.kind = BlockDecl::Kind::kHistory;
      for (const char* k : {"role", "for_each", "as", "key", "join"})
        if (b[k]) fail(f, b[k], id, std::string("a history block takes no `") + k + "`");
      d.history = scalar(f, b["history"], id, "history");
      if (d.history.rfind("{{", 0) == 0) d.history = var_path(f, b["history"], id, "history")[0];
      history_nodes_.push_back({b["history"], f, id});
    } else {
      d.kind = BlockDecl::Kind::kText;
      if (!b["role"]) fail(f, b, id, "a text block needs a `role` (system, user, assistant, tool)");
      d.role = scalar(f, b["role"], id, "role");
      if (d.role != "system" && d.role != "user" && d.role != "assistant" && d.role != "tool")
        fail(f, b["role"], id, "unknown role '" + d.role + "' (system, user, assistant, tool)");
      d.text = text_of(f, b["text"], id, "text");
      if (b["for_each"]) {
        d.for_each = var_path(f, b["for_each"], id, "for_each");
        d.loop_name = b["as"] ? scalar(f, b["as"], id, "as") : "item";
        if (!is_name(d.loop_name)) fail(f, b["as"], id, "bad loop name '" + d.loop_name + "'");
        if (b["key"]) d.key = text_of(f, b["key"], id, "key");
        for_each_nodes_.push_back({b["for_each"], f, id});
      } else {
        for (const char* k : {"as", "key"})
          if (b[k]) fail(f, b[k], id, std::string("`") + k + "` is only for blocks with `for_each`");
      }
      if (b["join"]) {
        d.join = boolean(f, b["join"], id, "join");
        if (d.join && d.role != "system" && d.role != "user")
          fail(f, b["join"], id, "only system and user blocks can `join` the previous message");
        if (d.join && (tpl_.blocks.empty() || tpl_.blocks.back().kind != BlockDecl::Kind::kText ||
                       tpl_.blocks.back().role != d.role))
          fail(f, b["join"], id, "`join: true` needs a previous text block with the same role");
      }
    }
    if (b["cache"]) d.cache = cache_policy(f, b["cache"], id);
    if (b["order"]) {
      const std::string o = scalar(f, b["order"], id, "order");
      if (o == "fixed") d.order = BlockOrder::kFixed;
      else if (o == "free") d.order = BlockOrder::kFree;
      else fail(f, b["order"], id, "`order` must be fixed or free, got '" + o + "'");
      if (d.order == BlockOrder::kFree && d.for_each.empty())
        fail(f, b["order"], id, "`order: free` is only for repeated blocks (`for_each`): their elements may be reordered");
    }
    if (b["volatile"]) d.is_volatile = boolean(f, b["volatile"], id, "volatile");
    tpl_.blocks.push_back(std::move(d));
  }

  void include(const File& from, const YAML::Node& n) {
    const std::string rel = scalar(from, n, "", "include");
    const fs::path base = fs::path(from.name).parent_path();
    const fs::path p = base / rel;
    if (++includes_ > options_.max_includes)
      throw IncludeError(at(from, n), "", "more than " + std::to_string(options_.max_includes) + " includes");
    // Each level of nesting is a few recursive calls with large frames (larger still under ASan).
    if (stack_.size() > kMaxIncludeDepth)
      throw IncludeError(at(from, n), "", "includes nested more than " + std::to_string(kMaxIncludeDepth) + " deep");
    std::error_code ec;
    const fs::path canon = fs::weakly_canonical(fs::absolute(p, ec), ec);
    if (ec) throw IncludeError(at(from, n), "", "cannot resolve included file '" + p.string() + "': " + ec.message());
    const fs::path inside = canon.lexically_relative(root_);
    if (inside.empty() || *inside.begin() == "..")
      throw IncludeError(at(from, n), "", "included file '" + rel + "' resolves to '" + canon.string() +
                                              "', outside the template root '" + root_.string() +
                                              "' (set a template root that contains it)");
    const std::string key = canon.string();
    for (const auto& s : stack_) {
      std::error_code ec2;
      const fs::path c2 = fs::weakly_canonical(s, ec2);
      if ((ec2 ? fs::path(s) : c2).string() == key) {
        std::string chain;
        for (const auto& x : stack_) chain += x + " -> ";
        throw IncludeError(at(from, n), "", "include cycle: " + chain + p.string());
      }
    }
    if (!fs::exists(canon, ec))
      throw IncludeError(at(from, n), "", "cannot read included file '" + p.string() + "': no such file");
    std::string text;
    try {
      text = read_regular_file(canon.string(), "included file", options_.max_file_bytes);
    } catch (const IoError& e) {
      throw IncludeError(at(from, n), "", e.what());
    }
    load_file(File{p.string(), std::move(text)}, false, at(from, n));
  }

  // Cross-checks that need the whole template (includes may declare vars and tools after use).
  void finish() {
    for (const auto& [node, f, id] : tools_nodes_) {
      for (auto& b : tpl_.blocks) {
        if (b.id != id || b.kind != BlockDecl::Kind::kTools) continue;
        if (b.tools == std::vector<std::string>{"*"}) {
          b.tools.clear();
          for (const auto& t : tpl_.tools) b.tools.push_back(t.name);
          if (b.tools.empty()) fail(f, node, id, "`tools: all` but the template declares no tools");
        }
        for (const auto& name : b.tools)
          if (!tpl_.find_tool(name)) fail(f, node, id, "unknown tool '" + name + "'");
      }
    }
    if (has_tool_choice_) {
      const std::string& c = tpl_.agent.tool_choice;
      if (c != "auto" && c != "none" && c != "required" && !tpl_.find_tool(c))
        fail(tool_choice_file_, tool_choice_node_, "",
             "`tool_choice` must be auto, none, required or a declared tool, got '" + c + "'");
    }
    for (const auto& [node, f, id] : history_nodes_) {
      const BlockDecl* b = find_block(id);
      const VarDecl* v = tpl_.find_var(b->history);
      if (!v) fail(f, node, id, "undefined variable '" + b->history + "'");
      if (v->type != VarType::kList) fail(f, node, id, "history variable '" + v->name + "' must be a list of messages");
    }
    for (const auto& [node, f, id] : for_each_nodes_) {
      const BlockDecl* b = find_block(id);
      const VarDecl* v = tpl_.find_var(b->for_each[0]);
      if (!v) fail(f, node, id, "undefined variable '" + b->for_each[0] + "'");
      if (b->for_each.size() == 1 && v->type != VarType::kList)
        fail(f, node, id, "`for_each` needs a list, '" + v->name + "' is a " + var_type_name(v->type));
    }
    // Every variable a text reads must be declared (or be the block's loop name).
    for (const auto& b : tpl_.blocks) {
      std::vector<VariableUse> uses;
      if (b.kind == BlockDecl::Kind::kText) uses = variable_uses(b.text);
      if (b.key) {
        auto k = variable_uses(*b.key);
        uses.insert(uses.end(), k.begin(), k.end());
      }
      for (const auto& u : uses) {
        if (!b.for_each.empty() && u.path[0] == b.loop_name) continue;
        const VarDecl* v = tpl_.find_var(u.path[0]);
        if (!v) throw TemplateError(u.loc, b.id, "undefined variable '" + u.path[0] + "'" + suggestion(u.path[0]));
        if (u.path.size() > 1 && (v->type == VarType::kString || v->type == VarType::kNumber || v->type == VarType::kBool))
          throw TemplateError(u.loc, b.id,
                              "variable '" + v->name + "' is a " + var_type_name(v->type) + ", it has no field '" +
                                  u.path[1] + "'");
      }
    }
    // Framing comes from the chat format; markup typed into a template would forge turns behind its back.
    for (const auto& b : tpl_.blocks) {
      if (b.kind == BlockDecl::Kind::kText) check_literal_markup(b.text.nodes(), b.id);
    }
    // The chat template renders tools inside the first system message, so the tools block must be there.
    for (size_t i = 0; i < tpl_.blocks.size(); ++i) {
      const BlockDecl& b = tpl_.blocks[i];
      if (b.kind != BlockDecl::Kind::kTools) continue;
      bool ok = true;
      for (size_t j = 0; j < i; ++j) {
        const BlockDecl& p = tpl_.blocks[j];
        ok &= p.kind == BlockDecl::Kind::kText && p.role == "system" && p.for_each.empty() && (j == 0 || p.join);
      }
      if (!ok)
        throw TemplateError(b.loc, b.id,
                            "a tools block must be the first block or follow the first system message directly "
                            "(the chat template renders tool docs inside the first system message)");
      for (size_t j = i + 1; j < tpl_.blocks.size(); ++j)
        if (tpl_.blocks[j].join && j == i + 1)
          throw TemplateError(tpl_.blocks[j].loc, tpl_.blocks[j].id, "a block cannot `join` a tools block");
    }
  }

  static void check_literal_markup(const std::vector<TemplateNode>& nodes, const std::string& block) {
    for (const auto& n : nodes) {
      if (n.kind == TemplateNode::Kind::kText) {
        if (auto m = find_chat_markup(n.text, all_reserved_markers()))
          throw TemplateError(n.loc, block,
                              "template text contains chat markup '" + m->marker +
                                  "'; roles and tool calls come from the chat format (use a block with that role)");
      }
      check_literal_markup(n.body, block);
      check_literal_markup(n.else_body, block);
    }
  }

  std::string suggestion(const std::string& name) const {
    for (const auto& v : tpl_.vars) {
      // One edit or one transposition apart: likely a typo.
      const std::string& a = v.name;
      if (a.size() == name.size()) {
        int diff = 0;
        std::vector<size_t> where;
        for (size_t i = 0; i < a.size(); ++i)
          if (a[i] != name[i]) where.push_back(i), ++diff;
        if (diff == 1 || (diff == 2 && where[1] == where[0] + 1 && a[where[0]] == name[where[1]] &&
                          a[where[1]] == name[where[0]]))
          return " (did you mean '" + a + "'?)";
      }
    }
    std::string known;
    for (const auto& v : tpl_.vars) known += (known.empty() ? "" : ", ") + v.name;
    return known.empty() ? " (the template declares no variables)" : " (declared: " + known + ")";
  }

  const BlockDecl* find_block(const std::string& id) const {
    for (const auto& b : tpl_.blocks)
      if (b.id == id) return &b;
    HYPIC_ASSERT(false, "block '" + id + "' vanished");
    return nullptr;
  }

  static bool is_name(const std::string& s) {
    if (s.empty() || !(std::isalpha(static_cast<unsigned char>(s[0])) || s[0] == '_')) return false;
    return std::all_of(s.begin(), s.end(), [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; });
  }
  static bool is_block_id(const std::string& s) {
    return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
      return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-';
    });
  }
  static bool is_tool_name(const std::string& s) {
    return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
      return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.';
    });
  }

  struct Pending {
    YAML::Node node;
    File file;
    std::string block;
  };

  static constexpr int kMaxValueDepth = 64;
  static constexpr size_t kMaxIncludeDepth = 32;

  const LoadOptions options_;
  fs::path root_;
  size_t converted_ = 0;  // YAML nodes turned into JSON so far
  size_t includes_ = 0;
  Template tpl_;
  std::vector<std::string> stack_;
  std::vector<Pending> tools_nodes_, history_nodes_, for_each_nodes_;
  YAML::Node tool_choice_node_;
  bool has_tool_choice_ = false;
  File tool_choice_file_;
};

}  // namespace

Template parse_template(const std::string& yaml_text, const std::string& file_name, const LoadOptions& options) {
  return Loader(options).load_root(yaml_text, file_name);
}

Template load_template(const std::string& path, const LoadOptions& options) {
  return parse_template(read_regular_file(path, "template", options.max_file_bytes), path, options);
}

}  // namespace hypic::dsl
