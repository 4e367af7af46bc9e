#include "dsl/compiler.h"

#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "dsl/lint.h"
#include "runtime/text/chat_format.h"
#include "runtime/regular_file.h"

namespace hypic::dsl {
namespace {


using Range = std::pair<size_t, size_t>;

// One chat message under construction: the blocks that supply its content.
struct MessageDraft {
  ChatMessage msg;
  std::vector<size_t> blocks;  // indexes into plan.blocks
  std::vector<Range> raw;      // bytes of msg.content that `markup: raw` variables inserted
};

class Compiler {
 public:
  Compiler(const Template& tpl, const Json& vars, const CompileOptions& opt)
      : tpl_(tpl), opt_(opt), format_(opt.format ? opt.format : &default_chat_format()) {
    markers_ = format_->reserved_markers();
    bind_variables(vars);
  }

  PromptPlan run() {
    plan_.name = tpl_.name;
    plan_.chat_format = format_->name();
    plan_.agent = tpl_.agent;
    plan_.generation_prompt = format_->generation_prompt(tpl_.agent.thinking);
    for (const auto& b : tpl_.blocks) {
      switch (b.kind) {
        case BlockDecl::Kind::kText: add_text_block(b); break;
        case BlockDecl::Kind::kTools: add_tools_block(b); break;
        case BlockDecl::Kind::kHistory: add_history_block(b); break;
      }
    }
    frame();
    if (opt_.tokenizer) {
      KeyContext ctx{opt_.model_fingerprint, opt_.tokenizer->fingerprint(), opt_.seam_width};
      assign_tokens_and_keys(plan_, *opt_.tokenizer, ctx);
    }
    lint_plan(plan_);
    return std::move(plan_);
  }

 private:
  void bind_variables(const Json& vars) {
    const SourceLocation top{tpl_.file, 1, 1};
    if (!vars.is_object()) throw VariableError(top, "", opt_.vars_source + ": variables must be a JSON object");
    for (const auto& [name, value] : vars.items()) {
      if (!tpl_.find_var(name)) {
        std::string known;
        for (const auto& v : tpl_.vars) known += (known.empty() ? "" : ", ") + v.name;
        throw VariableError(top, "",
                            opt_.vars_source + " sets '" + name + "', which the template does not declare (declared: " +
                                (known.empty() ? "none" : known) + ")");
      }
    }
    for (const auto& d : tpl_.vars) {
      const Json* v = nullptr;
      auto it = vars.find(d.name);
      if (it != vars.end()) v = &*it;
      else if (!d.required) v = &d.default_value;
      else
        throw VariableError(d.loc, "", "required variable '" + d.name + "' (" + var_type_name(d.type) +
                                           ") is missing from " + opt_.vars_source);
      if (!value_fits(d.type, *v))
        throw VariableError(d.loc, "", "variable '" + d.name + "' is declared " + var_type_name(d.type) + " but " +
                                           opt_.vars_source + " gives a " + json_type_name(*v));
      if (d.items) {
        for (size_t i = 0; i < v->size(); ++i)
          if (!value_fits(*d.items, (*v)[i]))
            throw VariableError(d.loc, "", "element " + std::to_string(i) + " of list '" + d.name + "' is a " +
                                               json_type_name((*v)[i]) + ", declared items: " +
                                               var_type_name(*d.items) + " (from " + opt_.vars_source + ")");
      }
      values_.emplace(d.name, v);
    }
  }

  RenderEnv env_for(const BlockDecl& b) const {
    RenderEnv env;
    env.block = b.id;
    env.vars_source = opt_.vars_source;
    env.extra_markers = markers_;
    for (const auto& d : tpl_.vars) env.bindings.push_back(Binding{d.name, values_.at(d.name), d.markup, d.name});
    return env;
  }

  // Why a block is volatile, or "" when it is stable.
  std::string volatile_reason(const BlockDecl& b) const {
    if (b.is_volatile) return "marked volatile";
    if (b.cache == CachePolicy::kNone) return "cache: none";
    if (b.kind != BlockDecl::Kind::kText) return "";
    for (const auto& u : variable_uses(b.text)) {
      if (!b.for_each.empty() && u.path[0] == b.loop_name) continue;
      const VarDecl* v = tpl_.find_var(u.path[0]);
      if (v && v->is_volatile) return "reads volatile variable '" + v->name + "'";
      if (is_per_query_name(u.path[0])) return "reads per-query variable '" + u.path[0] + "'";
    }
    return "";
  }

  PlanBlock make_block(const BlockDecl& b, std::string id, std::string role, std::string kind) const {
    PlanBlock p;
    p.id = std::move(id);
    p.group = b.id;
    p.role = std::move(role);
    p.kind = std::move(kind);
    p.cache = b.cache;
    p.order = b.order;
    p.volatile_reason = volatile_reason(b);
    p.is_volatile = !p.volatile_reason.empty();
    p.loc = b.loc;
    return p;
  }

  // Appends content to the current message, or starts a new one. `raw`: ranges of block.content.
  void place(PlanBlock block, bool join, const ChatMessage& msg, const std::vector<Range>& raw) {
    if (join) {
      HYPIC_ASSERT(!drafts_.empty() && drafts_.back().msg.role == block.role, "join validated at load");
    } else {
      drafts_.push_back(MessageDraft{msg, {}, {}});
      drafts_.back().msg.content.clear();
    }
    MessageDraft& d = drafts_.back();
    for (const Range& r : raw) d.raw.emplace_back(d.msg.content.size() + r.first, d.msg.content.size() + r.second);
    d.msg.content += block.content;
    block.message = int(drafts_.size()) - 1;
    d.blocks.push_back(plan_.blocks.size());
    plan_.blocks.push_back(std::move(block));
  }

  void add_text_block(const BlockDecl& b) {
    RenderEnv env = env_for(b);
    if (b.for_each.empty()) {
      PlanBlock p = make_block(b, b.id, b.role, "text");
      p.content = render(b.text, env);
      ChatMessage m{b.role, p.content, std::nullopt, {}, {}};
      place(std::move(p), b.join && !drafts_.empty(), m, env.raw_ranges);
      return;
    }
    // The list: a variable, or a field of one.
    RenderEnv probe = env;
    const Binding* root = nullptr;
    for (const auto& bd : probe.bindings)
      if (bd.name == b.for_each[0]) root = &bd;
    const Json* list = root->value;
    for (size_t i = 1; i < b.for_each.size(); ++i) {
      if (!list->is_object() || !list->contains(b.for_each[i]))
        throw VariableError(b.loc, b.id, "'" + path_string(b.for_each) + "' does not exist in " + opt_.vars_source);
      list = &(*list)[b.for_each[i]];
    }
    if (!list->is_array())
      throw VariableError(b.loc, b.id, "`for_each` needs a list, '" + path_string(b.for_each) + "' is a " +
                                           json_type_name(*list));
    std::set<std::string> keys;
    bool first = true;
    for (const Json& elem : *list) {
      env.bindings.push_back(Binding{b.loop_name, &elem, root->markup, root->variable});
      env.raw_ranges.clear();
      std::string content = render(b.text, env);
      const std::vector<Range> raw = env.raw_ranges;
      std::string key;
      if (b.key) {
        key = render(*b.key, env);
        if (key.empty()) throw VariableError(b.loc, b.id, "`key` rendered empty for an element of '" + path_string(b.for_each) + "'");
      } else {
        // Same element text, same id: a chunk is the same segment whenever it is retrieved.
        key = sha256_hex(content).substr(0, 16);
      }
      env.bindings.pop_back();
      if (!keys.insert(key).second)
        throw VariableError(b.loc, b.id, "two elements of '" + path_string(b.for_each) + "' have the same key '" + key +
                                             "' (block ids must be unique; set `key:` or drop the duplicate)");
      PlanBlock p = make_block(b, b.id + "." + key, b.role, "text");
      p.content = std::move(content);
      ChatMessage m{b.role, p.content, std::nullopt, {}, {}};
      const bool join = (b.join && !drafts_.empty()) || (b.join && !first);
      place(std::move(p), join, m, raw);
      first = false;
    }
  }

  void add_tools_block(const BlockDecl& b) {
    for (const auto& name : b.tools) {
      const ToolDecl* t = tpl_.find_tool(name);
      Json fn;
      fn["name"] = t->name;
      if (!t->description.empty()) fn["description"] = t->description;
      fn["parameters"] = t->parameters;
      plan_.tools.push_back(Json{{"type", "function"}, {"function", fn}});
    }
    PlanBlock p = make_block(b, b.id, "system", "tools");
    p.message = -1;
    tools_block_ = plan_.blocks.size();
    plan_.blocks.push_back(std::move(p));
  }

  void add_history_block(const BlockDecl& b) {
    const VarDecl* d = tpl_.find_var(b.history);
    const Json& list = *values_.at(b.history);
    for (size_t i = 0; i < list.size(); ++i) {
      const Json& m = list[i];
      const std::string where = "message " + std::to_string(i) + " of '" + b.history + "' (from " + opt_.vars_source + ")";
      if (!m.is_object()) throw VariableError(b.loc, b.id, where + " is not an object {role, content}");
      for (const auto& [k, v] : m.items())
        if (k != "role" && k != "content" && k != "tool_calls" && k != "reasoning_content" && k != "tool_call_id" &&
            k != "name")
          throw VariableError(b.loc, b.id, where + " has unknown field '" + k + "'");
      if (!m.contains("role") || !m["role"].is_string()) throw VariableError(b.loc, b.id, where + " needs a string `role`");
      const std::string role = m["role"];
      if (role != "system" && role != "user" && role != "assistant" && role != "tool")
        throw VariableError(b.loc, b.id, where + " has unknown role '" + role + "'");
      if (m.contains("content") && !m["content"].is_string() && !m["content"].is_null())
        throw VariableError(b.loc, b.id, where + ": `content` must be a string");
      ChatMessage fm;
      fm.role = role;
      auto checked = [&](const std::string& text) {
        return apply_markup_policy(text, d->markup, d->name, markers_, b.loc, b.id, opt_.vars_source);
      };
      fm.content = checked(m.contains("content") && m["content"].is_string() ? m["content"].get<std::string>() : "");
      if (m.contains("tool_calls") && !m["tool_calls"].is_null()) {
        if (role != "assistant" || !m["tool_calls"].is_array())
          throw VariableError(b.loc, b.id, where + ": `tool_calls` must be a list on an assistant message");
        for (const auto& tc : m["tool_calls"]) {
          const Json& f = tc.is_object() && tc.contains("function") ? tc["function"] : tc;
          if (!f.is_object() || !f.contains("name") || !f["name"].is_string())
            throw VariableError(b.loc, b.id, where + ": every tool call needs a string `name`");
          ToolCall call;
          call.name = checked(f["name"].get<std::string>());
          // Every string of the arguments reaches the prompt (keys and values alike): each is checked.
          if (f.contains("arguments")) call.arguments = checked_json(f["arguments"], checked);
          fm.tool_calls.push_back(std::move(call));
        }
      }
      if (m.contains("reasoning_content") && m["reasoning_content"].is_string())
        fm.reasoning_content = checked(m["reasoning_content"].get<std::string>());
      PlanBlock p = make_block(b, b.id + "." + std::to_string(i), role, "history");
      p.content = fm.content;
      std::vector<Range> raw;
      if (d->markup == MarkupPolicy::kRaw && !fm.content.empty()) raw.emplace_back(0, fm.content.size());
      place(std::move(p), false, fm, raw);
    }
  }

  // `v` with the markup policy applied to every string in it, object keys included.
  template <typename Check>
  static Json checked_json(const Json& v, const Check& checked, int depth = 0) {
    if (depth > 256) throw VariableError(SourceLocation{}, "", "tool-call arguments nested deeper than 256 levels");
    if (v.is_string()) return checked(v.get<std::string>());
    if (v.is_array()) {
      Json out = Json::array();
      for (const auto& x : v) out.push_back(checked_json(x, checked, depth + 1));
      return out;
    }
    if (v.is_object()) {
      Json out = Json::object();
      for (auto it = v.begin(); it != v.end(); ++it) out[checked(it.key())] = checked_json(it.value(), checked, depth + 1);
      return out;
    }
    return v;
  }

  // Markup may also form where pieces meet — two variables side by side, a variable after template
  // text, two joined blocks — so every message's assembled text is checked; only markers wholly
  // inside one `markup: raw` insertion are allowed.
  void check_assembled_markup() const {
    for (const MessageDraft& d : drafts_) {
      const std::string& text = d.msg.content;
      for (size_t pos = 0; pos < text.size();) {
        const auto m = find_chat_markup(std::string_view(text).substr(pos), markers_);
        if (!m) break;
        const size_t at = pos + m->offset, end = at + m->marker.size();
        bool inside_raw = false;
        for (const Range& r : d.raw) inside_raw |= r.first <= at && end <= r.second;
        if (!inside_raw) {
          // The block whose text holds the marker's first byte.
          size_t off = 0;
          const PlanBlock* holder = &plan_.blocks[d.blocks.back()];
          for (size_t bi : d.blocks) {
            const PlanBlock& p = plan_.blocks[bi];
            if (at < off + p.content.size()) {
              holder = &p;
              break;
            }
            off += p.content.size();
          }
          throw InjectionError(holder->loc, holder->group,
                               "the assembled text of block '" + holder->id + "' contains chat markup '" + m->marker +
                                   "' at byte " + std::to_string(at - off) +
                                   " of its message, formed where variable values and template text meet; chat "
                                   "markup comes only from the chat format");
        }
        pos = at + 1;
      }
    }
  }

  // Renders the conversation and cuts its bytes into the blocks' texts.
  void frame() {
    Conversation conv;
    for (auto& d : drafts_) {
      // A message ends at its last line of text: the final line break of a `|` scalar is not content.
      std::string& c = d.msg.content;
      if (d.msg.role != "assistant" && !c.empty() && c.back() == '\n') {
        c.pop_back();
        for (Range& r : d.raw) r.second = std::min(r.second, c.size());
        for (auto it = d.blocks.rbegin(); it != d.blocks.rend(); ++it) {
          std::string& part = plan_.blocks[*it].content;
          if (part.empty()) continue;
          part.pop_back();
          break;
        }
      }
      conv.messages.push_back(d.msg);
    }
    check_assembled_markup();
    conv.tools = plan_.tools;
    RenderOptions ro;
    ro.add_generation_prompt = false;
    RenderedChat f;
    try {
      f = format_->render(conv, ro);
    } catch (const InvalidArgument& e) {
      const PlanBlock& p = plan_.blocks.empty() ? PlanBlock() : plan_.blocks.back();
      throw TemplateError(p.loc, p.group, std::string("the ") + format_->name() + " chat format cannot render this "
                                          "conversation: " + e.what());
    }
    HYPIC_ASSERT(f.messages.size() == conv.messages.size(), "the format returned a span per message");
    std::vector<size_t> begin(plan_.blocks.size(), 0);
    if (tools_block_) {
      HYPIC_ASSERT(f.tools.has_value(), "the format rendered the tools");
      plan_.blocks[*tools_block_].text = f.text.substr(f.tools->begin, f.tools->size());
      begin[*tools_block_] = f.tools->begin;
    }
    for (size_t mi = 0; mi < drafts_.size(); ++mi) {
      const TextSpan span = f.messages[mi];
      const auto& parts = drafts_[mi].blocks;
      if (parts.size() == 1) {
        plan_.blocks[parts[0]].text = f.text.substr(span.begin, span.size());
        begin[parts[0]] = span.begin;
        continue;
      }
      // Joined parts are cut where their content lies in the text (the format may trim the message).
      const ContentPlacement& cp = f.content[mi];
      if (cp.at == std::string::npos) {
        const PlanBlock& p = plan_.blocks[parts[1]];
        throw TemplateError(p.loc, p.group, std::string("the ") + format_->name() +
                                                " chat format rewrites this message's text, so its joined blocks "
                                                "cannot be cut apart; do not `join` here");
      }
      size_t cut = span.begin;
      size_t content_end = 0;  // in the message's content
      for (size_t k = 0; k < parts.size(); ++k) {
        PlanBlock& p = plan_.blocks[parts[k]];
        content_end += p.content.size();
        const size_t in_text = std::min(content_end > cp.skipped ? content_end - cp.skipped : 0, cp.length);
        const size_t end = k + 1 == parts.size() ? span.end : cp.at + in_text;
        p.text = f.text.substr(cut, end - cut);
        begin[parts[k]] = cut;
        cut = end;
      }
    }
    // The plan lists blocks in text order (a format may put the tool docs before the system text).
    std::vector<size_t> order(plan_.blocks.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return begin[a] < begin[b]; });
    std::vector<PlanBlock> sorted;
    for (size_t i : order) sorted.push_back(std::move(plan_.blocks[i]));
    plan_.blocks = std::move(sorted);
    HYPIC_ASSERT(plan_.text() == f.text, "blocks tile the rendered conversation");
    // Tokens and keys are per block, so a block that renders to nothing would be an empty segment.
    for (const auto& p : plan_.blocks)
      if (p.text.empty()) throw TemplateError(p.loc, p.group, "block '" + p.id + "' renders to no text");
  }

  const Template& tpl_;
  const CompileOptions& opt_;
  const ChatFormat* format_;
  std::vector<std::string> markers_;
  std::map<std::string, const Json*> values_;
  PromptPlan plan_;
  std::vector<MessageDraft> drafts_;
  std::optional<size_t> tools_block_;
};

}  // namespace

PromptPlan compile(const Template& tpl, const Json& vars, const CompileOptions& options) {
  return Compiler(tpl, vars, options).run();
}

Json load_variables(const std::string& path) {
  const std::string text = read_regular_file(path, "variables file");
  try {
    return Json::parse(text);
  } catch (const Json::exception& e) {  // parse_error, or out_of_range for a number too large
    throw FormatError(path + ": not valid JSON: " + e.what());
  }
}

}  // namespace hypic::dsl
