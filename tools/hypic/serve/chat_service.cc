#include "tools/hypic/serve/chat_service.h"

#include "dsl/compiler.h"
#include "dsl/hf_plan_tokenizer.h"
#include "tools/hypic/serve/request_blocks.h"

namespace hypic::serve {

PreparedPrompt prepare_chat(const ChatRequest& req, const ChatFormat& format, const Tokenizer& tok) {
  PreparedPrompt p;
  Conversation conv = req.conversation;
  using TC = ChatRequest::ToolChoice;
  if (req.tool_choice == TC::None) conv.tools = Json::array();  // no tools shown, none parsed
  if (req.tool_choice == TC::Named) {
    Json only = Json::array();
    for (const Json& x : conv.tools)
      if (find_tool(Json::array({x}), req.tool_name)) only.push_back(x);
    conv.tools = only;
  }
  RenderOptions ro;
  ro.enable_thinking = req.enable_thinking;
  RenderedChat chat;
  try {
    chat = format.render(conv, ro);
  } catch (const Error& e) {
    throw bad_request(e.what(), "messages");
  }
  p.tools = conv.tools;
  p.starts_in_reasoning = format.generation_starts_in_reasoning(req.enable_thinking);
  // A call is required: the reply starts inside one (both formats open a call with this tag). Not done
  // when the reply starts in reasoning, which must come first.
  if ((req.tool_choice == TC::Required || req.tool_choice == TC::Named) && !p.starts_in_reasoning)
    p.forced = "<tool_call>\n";
  const std::vector<TextBlock> text = split_rendered_chat(chat, conv, req.parts, p.forced);
  for (size_t i = 0; i < text.size(); ++i) {
    PromptBlock b;
    b.tokens = tok.encode(text[i].text);
    b.cache = i + 1 == text.size() ? BlockCache::None : BlockCache::Cache;
    if (b.tokens.empty()) continue;
    p.blocks.push_back(std::move(b));
    if (i + 1 < text.size()) p.kinds.push_back(text[i].kind);
  }
  if (p.blocks.empty() || p.blocks.back().cache != BlockCache::None)
    throw bad_request("the conversation renders to an empty prompt", "messages");
  return p;
}

namespace {

BlockCache engine_cache(dsl::CachePolicy p) {
  switch (p) {
    case dsl::CachePolicy::kPin: return BlockCache::Pin;
    case dsl::CachePolicy::kCache: return BlockCache::Cache;
    case dsl::CachePolicy::kNone: return BlockCache::None;
  }
  return BlockCache::Cache;
}

// The request field a variable mistake is about: the first declared variable that is missing or of the
// wrong type, or the first one given that the template does not declare ("hypic.vars" when none is).
std::string variable_param(const dsl::Template& tpl, const Json& vars) {
  for (const auto& [name, v] : vars.items())
    if (!tpl.find_var(name)) return "hypic.vars." + name;
  for (const dsl::VarDecl& d : tpl.vars) {
    auto it = vars.find(d.name);
    if (it == vars.end() ? d.required : !dsl::value_fits(d.type, *it)) return "hypic.vars." + d.name;
    if (it != vars.end() && d.items)
      for (const Json& e : *it)
        if (!dsl::value_fits(*d.items, e)) return "hypic.vars." + d.name;
  }
  return "hypic.vars";
}

// A template error's message with the templates folder taken out of its file names (clients know
// templates by name, not by where the server keeps them).
std::string without_dir(std::string msg, const std::string& dir) {
  const std::string prefix = dir.empty() || dir.back() == '/' ? dir : dir + "/";
  if (prefix.empty()) return msg;
  for (size_t at; (at = msg.find(prefix)) != std::string::npos;) msg.erase(at, prefix.size());
  return msg;
}

}  // namespace

PreparedPrompt prepare_template_chat(const ChatRequest& req, const TemplateCatalog& templates, const ChatFormat& format,
                                     const Tokenizer& tok) {
  const ChatRequest::TemplateRef& ref = *req.template_ref;
  const dsl::Template& tpl = templates.get(ref.name);
  dsl::HfPlanTokenizer plan_tok(tok);
  dsl::CompileOptions co;
  co.format = &format;
  co.tokenizer = &plan_tok;
  co.vars_source = "hypic.vars";
  dsl::PromptPlan plan;
  try {
    plan = dsl::compile(tpl, ref.vars, co);
  } catch (const dsl::VariableError& e) {
    throw bad_request("template '" + ref.name + "': " + without_dir(e.what(), templates.dir()),
                      variable_param(tpl, ref.vars));
  } catch (const Error& e) {
    throw bad_request("template '" + ref.name + "': " + without_dir(e.what(), templates.dir()), "hypic.vars");
  }

  PreparedPrompt p;
  using TC = ChatRequest::ToolChoice;
  // The template's tool docs are part of its blocks, so tool_choice cannot take them out of the prompt:
  // "none" only stops calls from being parsed, a named tool must be one the template offers.
  if (req.tool_choice == TC::Named && !find_tool(plan.tools, req.tool_name))
    throw bad_request("'tool_choice' names '" + req.tool_name + "', which template '" + ref.name + "' does not offer",
                      "tool_choice");
  if (req.tool_choice == TC::Required && plan.tools.empty())
    throw bad_request("'tool_choice' is required but template '" + ref.name + "' offers no tools", "tool_choice");
  if (req.tool_choice != TC::None) p.tools = plan.tools;
  if (req.tool_choice == TC::Named) {
    Json only = Json::array();
    for (const Json& x : plan.tools)
      if (find_tool(Json::array({x}), req.tool_name)) only.push_back(x);
    p.tools = only;
  }
  const std::optional<bool> thinking = req.enable_thinking ? req.enable_thinking : tpl.agent.thinking;
  p.starts_in_reasoning = format.generation_starts_in_reasoning(thinking);
  if ((req.tool_choice == TC::Required || req.tool_choice == TC::Named) && !p.starts_in_reasoning)
    p.forced = "<tool_call>\n";

  for (const dsl::PlanBlock& b : plan.blocks) {
    if (b.tokens->empty()) continue;
    p.blocks.push_back({*b.tokens, engine_cache(b.cache)});
    p.kinds.push_back("template");
    p.ids.push_back(b.id);
  }

  // The request's messages continue the template's conversation. They are rendered after a stand-in
  // user turn (what the template's conversation is to them) and the text from the end of that turn on
  // is split as a plain request's would be; the generation prompt is the query tail.
  std::vector<TextBlock> rest;
  if (req.conversation.messages.empty()) {
    rest.push_back({"prompt", format.generation_prompt(thinking) + p.forced});
  } else {
    Conversation conv;
    conv.messages.push_back(ChatMessage{"user", "continue"});
    for (const ChatMessage& m : req.conversation.messages) conv.messages.push_back(m);
    std::vector<std::vector<ContentPart>> parts(1);
    parts.insert(parts.end(), req.parts.begin(), req.parts.end());
    RenderOptions ro;
    ro.enable_thinking = thinking;
    RenderedChat chat;
    try {
      chat = format.render(conv, ro);
    } catch (const Error& e) {
      throw bad_request(e.what(), "messages");
    }
    const size_t cut = chat.messages.at(0).end;
    size_t at = 0;
    for (TextBlock& t : split_rendered_chat(chat, conv, parts, p.forced)) {
      const size_t begin = at;
      at += t.text.size();
      if (at <= cut) continue;  // the stand-in turn
      rest.push_back({t.kind, begin < cut ? t.text.substr(cut - begin) : t.text});
    }
  }
  for (size_t i = 0; i < rest.size(); ++i) {
    const bool tail = i + 1 == rest.size();
    PromptBlock b{tok.encode(rest[i].text), tail ? BlockCache::None : BlockCache::Cache};
    if (b.tokens.empty()) continue;
    p.blocks.push_back(std::move(b));
    if (!tail) {
      p.kinds.push_back(rest[i].kind);
      p.ids.emplace_back();
    }
  }
  if (p.blocks.empty() || p.blocks.back().cache != BlockCache::None)
    throw bad_request("template '" + ref.name + "' renders to an empty prompt", "hypic.template");
  return p;
}

PreparedPrompt prepare_completion(const CompletionRequest& req, const Tokenizer& tok) {
  PreparedPrompt p;
  // The prompt is tokenized whole (as any reference would); all but its last token is one cacheable
  // block, so a repeated prompt is reused.
  std::vector<int> ids = tok.encode(req.prompt);
  if (ids.empty()) throw bad_request("the prompt has no tokens", "prompt");
  if (ids.size() > 1) {
    p.blocks.push_back({std::vector<int>(ids.begin(), ids.end() - 1), BlockCache::Cache});
    p.kinds.push_back("prompt");
  }
  p.blocks.push_back({{ids.back()}, BlockCache::None});
  return p;
}

ReplyAssembler::ReplyAssembler(const ChatFormat& format, const PreparedPrompt& prompt, std::string call_id_prefix)
    : parser_(format.tool_call_parser(prompt.tools, prompt.starts_in_reasoning)), prefix_(std::move(call_id_prefix)) {
  if (!prompt.forced.empty()) {
    // The forced opening is part of the reply the parser reads, not of what the client sees.
    std::vector<ReplyEvent> ev;
    parser_->push(prompt.forced, ev);
    take(ev);
  }
}

std::vector<Json> ReplyAssembler::take(std::vector<ReplyEvent>& events) {
  std::vector<Json> deltas;
  for (ReplyEvent& e : events) {
    switch (e.kind) {
      case ReplyEvent::Kind::kText:
        if (e.text.empty()) break;
        reply_.content += e.text;
        deltas.push_back({{"content", e.text}});
        break;
      case ReplyEvent::Kind::kReasoning:
        if (e.text.empty()) break;
        reply_.reasoning += e.text;
        deltas.push_back({{"reasoning_content", e.text}});
        break;
      case ReplyEvent::Kind::kToolCall: {
        ToolCallOut c;
        c.id = prefix_ + std::to_string(reply_.tool_calls.size());
        c.name = e.call.name;
        c.arguments = e.call.arguments.dump();
        const int index = static_cast<int>(reply_.tool_calls.size());
        reply_.tool_calls.push_back(c);
        deltas.push_back({{"tool_calls", Json::array({{{"index", index},
                                                       {"id", c.id},
                                                       {"type", "function"},
                                                       {"function", {{"name", c.name}, {"arguments", c.arguments}}}}})}});
        break;
      }
      case ReplyEvent::Kind::kError:
        // A malformed call is not a call: the client gets its text as content, as the model wrote it.
        if (!e.error.body.empty()) {
          const std::string text = "<tool_call>" + e.error.body + (e.error.kind == ToolCallError::Kind::kUnterminated ? "" : "</tool_call>");
          reply_.content += text;
          deltas.push_back({{"content", text}});
        }
        errors_.push_back(e.error);
        break;
    }
  }
  events.clear();
  return deltas;
}

std::vector<Json> ReplyAssembler::push(std::string_view text) {
  std::vector<ReplyEvent> ev;
  parser_->push(text, ev);
  return take(ev);
}

std::vector<Json> ReplyAssembler::finish() {
  std::vector<ReplyEvent> ev;
  parser_->finish(ev);
  return take(ev);
}

ChatReply ReplyAssembler::reply(const std::string& engine_finish) const {
  ChatReply r = reply_;
  r.finish_reason = finish_reason(engine_finish, !r.tool_calls.empty());
  return r;
}

}  // namespace hypic::serve
