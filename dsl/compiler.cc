#include "dsl/compiler.h"

#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "dsl/lint.h"
#include "dsl/qwen_framer.h"
#include "runtime/regular_file.h"

namespace hypic::dsl {
namespace {


// One chat message under construction: the blocks that supply its content.
struct MessageDraft {
  FrameMessage msg;
  std::vector<size_t> blocks;  // indexes into plan.blocks
};

class Compiler {
 public:
  Compiler(const Template& tpl, const Json& vars, const CompileOptions& opt)
      : tpl_(tpl), opt_(opt), framer_(opt.framer ? opt.framer : &default_framer_) {
    markers_ = framer_->reserved_markers();
    bind_variables(vars);
  }

  PromptPlan run() {
    plan_.name = tpl_.name;
    plan_.chat_format = framer_->name();
    plan_.agent = tpl_.agent;
    plan_.generation_prompt = framer_->generation_prompt(tpl_.agent.thinking);
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

  // Appends content to the current message, or starts a new one.
  void place(PlanBlock block, bool join, const FrameMessage& msg) {
    if (join) {
      HYPIC_ASSERT(!drafts_.empty() && drafts_.back().msg.role == block.role, "join validated at load");
      drafts_.back().msg.content += block.content;
    } else {
      drafts_.push_back(MessageDraft{msg, {}});
    }
    block.message = int(drafts_.size()) - 1;
    drafts_.back().blocks.push_back(plan_.blocks.size());
    plan_.blocks.push_back(std::move(block));
  }

  void add_text_block(const BlockDecl& b) {
    RenderEnv env = env_for(b);
    if (b.for_each.empty()) {
      PlanBlock p = make_block(b, b.id, b.role, "text");
      p.content = render(b.text, env);
      FrameMessage m{b.role, p.content, nullptr, std::nullopt};
      place(std::move(p), b.join && !drafts_.empty(), m);
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
      std::string content = render(b.text, env);
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
      FrameMessage m{b.role, p.content, nullptr, std::nullopt};
      const bool join = (b.join && !drafts_.empty()) || (b.join && !first);
      place(std::move(p), join, m);
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
      FrameMessage fm;
      fm.role = role;
      const std::string raw = m.contains("content") && m["content"].is_string() ? m["content"].get<std::string>() : "";
      fm.content = apply_markup_policy(raw, d->markup, d->name, markers_, b.loc, b.id, opt_.vars_source);
      if (m.contains("tool_calls") && !m["tool_calls"].is_null()) {
        if (role != "assistant" || !m["tool_calls"].is_array())
          throw VariableError(b.loc, b.id, where + ": `tool_calls` must be a list on an assistant message");
        for (const auto& tc : m["tool_calls"]) {
          const Json& f = tc.contains("function") ? tc["function"] : tc;
          if (!f.is_object() || !f.contains("name") || !f["name"].is_string())
            throw VariableError(b.loc, b.id, where + ": every tool call needs a string `name`");
          apply_markup_policy(f["name"].get<std::string>(), d->markup, d->name, markers_, b.loc, b.id, opt_.vars_source);
          if (f.contains("arguments") && f["arguments"].is_string())
            apply_markup_policy(f["arguments"].get<std::string>(), d->markup, d->name, markers_, b.loc, b.id,
                                opt_.vars_source);
        }
        fm.tool_calls = m["tool_calls"];
      }
      if (m.contains("reasoning_content") && m["reasoning_content"].is_string())
        fm.reasoning_content = apply_markup_policy(m["reasoning_content"].get<std::string>(), d->markup, d->name,
                                                   markers_, b.loc, b.id, opt_.vars_source);
      PlanBlock p = make_block(b, b.id + "." + std::to_string(i), role, "history");
      p.content = fm.content;
      place(std::move(p), false, fm);
    }
  }

  // Renders the conversation and cuts its bytes into the blocks' texts.
  void frame() {
    std::vector<FrameMessage> msgs;
    for (auto& d : drafts_) {
      // A message ends at its last line of text: the final line break of a `|` scalar is not content.
      std::string& c = d.msg.content;
      if (d.msg.role != "assistant" && !c.empty() && c.back() == '\n') {
        c.pop_back();
        for (auto it = d.blocks.rbegin(); it != d.blocks.rend(); ++it) {
          std::string& part = plan_.blocks[*it].content;
          if (part.empty()) continue;
          part.pop_back();
          break;
        }
      }
      msgs.push_back(d.msg);
    }
    if (tools_block_ && *tools_block_ == 0 && !drafts_.empty() && drafts_[0].msg.role == "system") {
      const PlanBlock& t = plan_.blocks[0];
      throw TemplateError(t.loc, t.group,
                          "the tools block comes before the system message, but the chat template renders the system "
                          "text first: put the system block before the tools block");
    }
    const FramedConversation f = framer_->frame(msgs, plan_.tools);
    HYPIC_ASSERT(f.messages.size() == msgs.size(), "framer returned a span per message");
    if (tools_block_) {
      HYPIC_ASSERT(f.tools.has_value(), "framer rendered the tools");
      plan_.blocks[*tools_block_].text = f.text.substr(f.tools->begin, f.tools->end - f.tools->begin);
    }
    for (size_t mi = 0; mi < drafts_.size(); ++mi) {
      const ByteSpan span = f.messages[mi];
      const auto& parts = drafts_[mi].blocks;
      if (parts.size() == 1) {
        plan_.blocks[parts[0]].text = f.text.substr(span.begin, span.end - span.begin);
        continue;
      }
      HYPIC_ASSERT(f.content_at[mi] != std::string::npos, "joined parts need verbatim content");
      size_t cut = span.begin;
      size_t content_pos = f.content_at[mi];
      for (size_t k = 0; k < parts.size(); ++k) {
        PlanBlock& p = plan_.blocks[parts[k]];
        content_pos += p.content.size();
        const size_t end = k + 1 == parts.size() ? span.end : content_pos;
        p.text = f.text.substr(cut, end - cut);
        cut = end;
      }
    }
    HYPIC_ASSERT(plan_.text() == f.text, "blocks tile the framed conversation");
    // Tokens and keys are per block, so a block that frames to nothing would be an empty segment.
    for (const auto& p : plan_.blocks)
      if (p.text.empty()) throw TemplateError(p.loc, p.group, "block '" + p.id + "' renders to no text");
  }

  const Template& tpl_;
  const CompileOptions& opt_;
  QwenChatFramer default_framer_;
  const ChatFramer* framer_;
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
