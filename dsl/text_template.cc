#include "dsl/text_template.h"

#include <cctype>

namespace hypic::dsl {
namespace {

SourceLocation locate(const TextOrigin& o, std::string_view src, size_t offset) {
  int line_in_text = 0;
  size_t line_start = 0;
  for (size_t i = 0; i < offset && i < src.size(); ++i)
    if (src[i] == '\n') {
      ++line_in_text;
      line_start = i + 1;
    }
  const int col_in_line = int(offset - line_start);
  if (line_in_text == 0) return {o.file, o.line, o.column + col_in_line};
  return {o.file, o.line + line_in_text, (o.block_scalar ? o.column : 1) + col_in_line};
}

enum class TagKind { kVar, kEach, kIf, kElse, kEndEach, kEndIf, kComment };

struct Token {
  bool is_tag = false;
  std::string text;  // literal text, or the tag's inner text
  size_t offset = 0;
  TagKind kind = TagKind::kVar;
  std::vector<std::string> path;
  std::string loop_name;
};

std::string trim(std::string_view s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return std::string(s.substr(b, e - b));
}

bool is_ident(std::string_view s) {
  if (s.empty() || !(std::isalpha(static_cast<unsigned char>(s[0])) || s[0] == '_')) return false;
  for (char c : s)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_')) return false;
  return true;
}

bool is_index(std::string_view s) {
  if (s.empty() || s.size() > 9) return false;
  for (char c : s)
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
  return true;
}

constexpr int kMaxSectionDepth = 64;

class Parser {
 public:
  Parser(std::string_view src, const TextOrigin& origin, const std::string& block)
      : src_(src), origin_(origin), block_(block) {}

  std::vector<TemplateNode> run() {
    tokenize();
    strip_standalone_lines();
    size_t pos = 0;
    auto nodes = build(pos, nullptr);
    return nodes;
  }

 private:
  [[noreturn]] void fail(size_t offset, const std::string& msg) const {
    throw TemplateError(locate(origin_, src_, offset), block_, msg);
  }

  std::vector<std::string> parse_path(std::string_view s, size_t offset) const {
    std::vector<std::string> path;
    size_t start = 0;
    while (true) {
      const size_t dot = s.find('.', start);
      const std::string_view part = s.substr(start, dot == std::string_view::npos ? s.npos : dot - start);
      const bool ok = path.empty() ? is_ident(part) : (is_ident(part) || is_index(part));
      if (!ok) fail(offset, "bad variable reference '{{" + std::string(s) + "}}' (expected name, name.field or name.0)");
      path.emplace_back(part);
      if (dot == std::string_view::npos) break;
      start = dot + 1;
    }
    return path;
  }

  void classify(Token& t) const {
    const std::string inner = trim(t.text);
    if (inner.empty()) fail(t.offset, "empty tag '{{}}'");
    if (inner[0] == '!') {
      t.kind = TagKind::kComment;
      return;
    }
    if (inner == "else") {
      t.kind = TagKind::kElse;
      return;
    }
    if (inner == "/each" || inner == "/if") {
      t.kind = inner == "/each" ? TagKind::kEndEach : TagKind::kEndIf;
      return;
    }
    if (inner.rfind("#each", 0) == 0 && inner.size() > 5 && std::isspace(static_cast<unsigned char>(inner[5]))) {
      // #each <path> as <name>
      const std::string rest = trim(std::string_view(inner).substr(5));
      const size_t as = rest.find(" as ");
      if (as == std::string::npos) fail(t.offset, "expected '{{#each LIST as NAME}}', got '{{" + inner + "}}'");
      t.kind = TagKind::kEach;
      t.path = parse_path(trim(std::string_view(rest).substr(0, as)), t.offset);
      t.loop_name = trim(std::string_view(rest).substr(as + 4));
      if (!is_ident(t.loop_name)) fail(t.offset, "bad loop name '" + t.loop_name + "' in '{{" + inner + "}}'");
      return;
    }
    if (inner.rfind("#if", 0) == 0 && inner.size() > 3 && std::isspace(static_cast<unsigned char>(inner[3]))) {
      t.kind = TagKind::kIf;
      t.path = parse_path(trim(std::string_view(inner).substr(3)), t.offset);
      return;
    }
    if (inner[0] == '#' || inner[0] == '/' || inner[0] == '{' || inner[0] == '&' || inner[0] == '>' ||
        inner[0] == '^')
      fail(t.offset, "unsupported tag '{{" + inner +
                         "}}' (supported: {{name}}, {{#each LIST as NAME}}, {{#if PATH}}, {{else}}, {{! comment}})");
    t.kind = TagKind::kVar;
    t.path = parse_path(inner, t.offset);
  }

  void tokenize() {
    std::string text;
    size_t text_offset = 0;
    auto flush = [&] {
      if (!text.empty()) {
        Token t;
        t.text = text;
        t.offset = text_offset;
        tokens_.push_back(std::move(t));
      }
      text.clear();
    };
    size_t i = 0;
    while (i < src_.size()) {
      if (src_.compare(i, 3, "\\{{") == 0) {
        if (text.empty()) text_offset = i;
        text += "{{";
        i += 3;
        continue;
      }
      if (src_.compare(i, 2, "{{") == 0) {
        const size_t close = src_.find("}}", i + 2);
        if (close == std::string_view::npos) fail(i, "unclosed '{{' (write '\\{{' for a literal)");
        flush();
        Token t;
        t.is_tag = true;
        t.text = std::string(src_.substr(i + 2, close - i - 2));
        t.offset = i;
        if (t.text.find("{{") != std::string::npos) fail(i, "unclosed '{{' (write '\\{{' for a literal)");
        classify(t);
        tokens_.push_back(std::move(t));
        i = close + 2;
        continue;
      }
      if (text.empty()) text_offset = i;
      text.push_back(src_[i++]);
    }
    flush();
  }

  static bool is_section(const Token& t) { return t.is_tag && t.kind != TagKind::kVar; }

  // A line with only whitespace and one section tag or comment renders as nothing. Decisions are made
  // on the untrimmed texts so that consecutive standalone lines are all recognised.
  void strip_standalone_lines() {
    std::vector<size_t> cut_front(tokens_.size(), 0), cut_back(tokens_.size(), 0);
    for (size_t k = 0; k < tokens_.size(); ++k) {
      if (!is_section(tokens_[k])) continue;
      const Token* prev = k > 0 ? &tokens_[k - 1] : nullptr;
      const Token* next = k + 1 < tokens_.size() ? &tokens_[k + 1] : nullptr;
      if ((prev && prev->is_tag) || (next && next->is_tag)) continue;
      size_t back = 0;
      if (prev) {
        const size_t nl = prev->text.find_last_of('\n');
        const size_t from = nl == std::string::npos ? 0 : nl + 1;
        if (nl == std::string::npos && k - 1 != 0) continue;  // something else precedes us on this line
        if (prev->text.find_first_not_of(" \t", from) != std::string::npos) continue;
        back = prev->text.size() - from;
      }
      size_t front = 0;
      if (next) {
        const size_t nl = next->text.find('\n');
        const size_t end = nl == std::string::npos ? next->text.size() : nl;
        if (next->text.find_first_not_of(" \t") < end) continue;
        if (nl == std::string::npos && k + 2 != tokens_.size()) continue;
        front = nl == std::string::npos ? end : nl + 1;
      }
      if (prev) cut_back[k - 1] = back;
      if (next) cut_front[k + 1] = front;
    }
    for (size_t k = 0; k < tokens_.size(); ++k) {
      Token& t = tokens_[k];
      if (t.is_tag) continue;
      t.text.resize(t.text.size() - cut_back[k]);
      t.text.erase(0, cut_front[k]);
      t.offset += cut_front[k];
    }
  }

  // Builds nodes until the closing tag of `open` (or the end when open is null).
  std::vector<TemplateNode> build(size_t& pos, const Token* open, std::vector<TemplateNode>* else_out = nullptr,
                                  int depth = 0) {
    // Parsing, rendering and linting recurse once per level; a bound keeps hostile nesting off the stack.
    if (depth > kMaxSectionDepth)
      fail(open->offset, "sections ({{#if}}, {{#each}}) nested more than " + std::to_string(kMaxSectionDepth) +
                             " deep");
    std::vector<TemplateNode> out;
    std::vector<TemplateNode>* cur = &out;
    bool seen_else = false;
    while (pos < tokens_.size()) {
      const Token& t = tokens_[pos++];
      if (!t.is_tag) {
        if (!t.text.empty()) cur->push_back(TemplateNode{TemplateNode::Kind::kText, t.text, {}, {}, {}, {}, loc(t)});
        continue;
      }
      switch (t.kind) {
        case TagKind::kComment:
          break;
        case TagKind::kVar:
          cur->push_back(TemplateNode{TemplateNode::Kind::kVar, {}, t.path, {}, {}, {}, loc(t)});
          break;
        case TagKind::kEach: {
          TemplateNode n{TemplateNode::Kind::kEach, {}, t.path, t.loop_name, {}, {}, loc(t)};
          n.body = build(pos, &t, nullptr, depth + 1);
          cur->push_back(std::move(n));
          break;
        }
        case TagKind::kIf: {
          TemplateNode n{TemplateNode::Kind::kIf, {}, t.path, {}, {}, {}, loc(t)};
          n.body = build(pos, &t, &n.else_body, depth + 1);
          cur->push_back(std::move(n));
          break;
        }
        case TagKind::kElse:
          if (!open || open->kind != TagKind::kIf || seen_else) fail(t.offset, "'{{else}}' outside '{{#if}}'");
          seen_else = true;
          cur = else_out;
          break;
        case TagKind::kEndEach:
        case TagKind::kEndIf: {
          const TagKind want = t.kind == TagKind::kEndEach ? TagKind::kEach : TagKind::kIf;
          const char* name = t.kind == TagKind::kEndEach ? "{{/each}}" : "{{/if}}";
          if (!open) fail(t.offset, std::string("'") + name + "' without an opening tag");
          if (open->kind != want)
            fail(t.offset, std::string("'") + name + "' closes '{{" + trim(open->text) + "}}'");
          return out;
        }
      }
    }
    if (open) fail(open->offset, "'{{" + trim(open->text) + "}}' is never closed");
    return out;
  }

  SourceLocation loc(const Token& t) const { return locate(origin_, src_, t.offset); }

  std::string_view src_;
  const TextOrigin& origin_;
  const std::string& block_;
  std::vector<Token> tokens_;
};

void collect_uses(const std::vector<TemplateNode>& nodes, std::vector<std::string>& loops,
                  std::vector<VariableUse>& out) {
  for (const auto& n : nodes) {
    if (n.kind == TemplateNode::Kind::kText) continue;
    bool is_loop = false;
    for (const auto& l : loops) is_loop |= (l == n.path[0]);
    if (!is_loop) out.push_back({n.path, n.loc});
    if (n.kind == TemplateNode::Kind::kEach) {
      loops.push_back(n.loop_name);
      collect_uses(n.body, loops, out);
      loops.pop_back();
    } else if (n.kind == TemplateNode::Kind::kIf) {
      collect_uses(n.body, loops, out);
      collect_uses(n.else_body, loops, out);
    }
  }
}


struct Resolved {
  const Json* value;
  const Binding* binding;
};

Resolved resolve(const std::vector<std::string>& path, const RenderEnv& env, const SourceLocation& loc) {
  const Binding* b = nullptr;
  for (auto it = env.bindings.rbegin(); it != env.bindings.rend(); ++it)
    if (it->name == path[0]) {
      b = &*it;
      break;
    }
  HYPIC_ASSERT(b != nullptr, "unbound name '" + path[0] + "' passed the load-time check");
  const Json* v = b->value;
  for (size_t i = 1; i < path.size(); ++i) {
    const std::vector<std::string> head(path.begin(), path.begin() + long(i));
    if (v->is_object()) {
      auto it = v->find(path[i]);
      if (it == v->end())
        throw VariableError(loc, env.block,
                            "'" + path_string(head) + "' has no field '" + path[i] + "' (from " + env.vars_source + ")");
      v = &*it;
    } else if (v->is_array() && is_index(path[i])) {
      const size_t idx = std::stoul(path[i]);
      if (idx >= v->size())
        throw VariableError(loc, env.block,
                            "'" + path_string(head) + "' has " + std::to_string(v->size()) + " elements; index " +
                                path[i] + " is out of range (from " + env.vars_source + ")");
      v = &(*v)[idx];
    } else {
      throw VariableError(loc, env.block,
                          "'" + path_string(head) + "' is a " + json_type_name(*v) + ", it has no field '" + path[i] +
                              "' (from " + env.vars_source + ")");
    }
  }
  return {v, b};
}

bool truthy(const Json& v) {
  if (v.is_boolean()) return v.get<bool>();
  if (v.is_null()) return false;
  if (v.is_string() || v.is_array() || v.is_object()) return !v.empty();
  return v != 0;
}

// Nested {{#each}} over a few short lists multiplies: a small template and small variables could
// render (or just loop) for hours. Both the work and the output are bounded.
constexpr size_t kMaxRenderSteps = size_t{1} << 20;
constexpr size_t kMaxRenderedBytes = size_t{64} << 20;

void render_nodes(const std::vector<TemplateNode>& nodes, RenderEnv& env, std::string& out, size_t& steps) {
  for (const auto& n : nodes) {
    if (++steps > kMaxRenderSteps || out.size() > kMaxRenderedBytes)
      throw VariableError(n.loc, env.block,
                          "rendering exceeds " + std::to_string(kMaxRenderSteps) + " steps or " +
                              std::to_string(kMaxRenderedBytes) + " bytes (nested {{#each}} over large lists?)");
    switch (n.kind) {
      case TemplateNode::Kind::kText:
        out += n.text;
        break;
      case TemplateNode::Kind::kVar: {
        const Resolved r = resolve(n.path, env, n.loc);
        const Json& v = *r.value;
        if (v.is_string()) {
          const size_t at = out.size();
          out += apply_markup_policy(v.get_ref<const std::string&>(), r.binding->markup, r.binding->variable,
                                     env.extra_markers, n.loc, env.block, env.vars_source);
          if (r.binding->markup == MarkupPolicy::kRaw && out.size() > at) env.raw_ranges.emplace_back(at, out.size());
        } else if (v.is_boolean()) {
          out += v.get<bool>() ? "true" : "false";
        } else if (v.is_number()) {
          out += v.dump();
        } else {
          throw VariableError(n.loc, env.block,
                              "'" + path_string(n.path) + "' is a " + json_type_name(v) +
                                  "; only strings, numbers and bools can be substituted (use a field, or "
                                  "{{#each}} for a list)");
        }
        break;
      }
      case TemplateNode::Kind::kEach: {
        const Resolved r = resolve(n.path, env, n.loc);
        if (!r.value->is_array())
          throw VariableError(n.loc, env.block,
                              "'" + path_string(n.path) + "' is a " + json_type_name(*r.value) + ", {{#each}} needs a list");
        // Copied out: pushing loop bindings may reallocate env.bindings, which r.binding points into.
        const MarkupPolicy markup = r.binding->markup;
        const std::string variable = r.binding->variable;
        for (const Json& elem : *r.value) {
          env.bindings.push_back(Binding{n.loop_name, &elem, markup, variable});
          render_nodes(n.body, env, out, steps);
          env.bindings.pop_back();
        }
        break;
      }
      case TemplateNode::Kind::kIf: {
        const Resolved r = resolve(n.path, env, n.loc);
        render_nodes(truthy(*r.value) ? n.body : n.else_body, env, out, steps);
        break;
      }
    }
  }
}

}  // namespace

TextTemplate TextTemplate::parse(std::string_view source, const TextOrigin& origin, const std::string& block) {
  TextTemplate t;
  t.loc_ = SourceLocation{origin.file, origin.line, origin.column};
  t.nodes_ = Parser(source, origin, block).run();
  return t;
}

std::vector<VariableUse> variable_uses(const TextTemplate& t) {
  std::vector<std::string> loops;
  std::vector<VariableUse> out;
  collect_uses(t.nodes(), loops, out);
  return out;
}

std::string render(const TextTemplate& t, RenderEnv& env) {
  std::string out;
  size_t steps = 0;
  render_nodes(t.nodes(), env, out, steps);
  return out;
}

std::string apply_markup_policy(std::string_view text, MarkupPolicy policy, const std::string& variable,
                                const std::vector<std::string>& extra, const SourceLocation& loc,
                                const std::string& block, const std::string& vars_source) {
  switch (policy) {
    case MarkupPolicy::kRaw:
      return std::string(text);
    case MarkupPolicy::kNeutralize:
      return neutralize_chat_markup(text, extra);
    case MarkupPolicy::kReject:
      if (auto m = find_chat_markup(text, extra))
        throw InjectionError(loc, block,
                             "variable '" + variable + "' (from " + vars_source + ") contains chat markup '" +
                                 m->marker + "' at byte " + std::to_string(m->offset) +
                                 "; declare `markup: neutralize` on the variable to defuse it, or `markup: raw` "
                                 "to insert it unchanged");
      return std::string(text);
  }
  return std::string(text);
}

std::string path_string(const std::vector<std::string>& path) {
  std::string s;
  for (const auto& p : path) s += (s.empty() ? "" : ".") + p;
  return s;
}

const char* json_type_name(const Json& v) {
  switch (v.type()) {
    case Json::value_t::null: return "null";
    case Json::value_t::boolean: return "bool";
    case Json::value_t::string: return "string";
    case Json::value_t::array: return "list";
    case Json::value_t::object: return "object";
    default: return "number";
  }
}

}  // namespace hypic::dsl
