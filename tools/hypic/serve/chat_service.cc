#include "tools/hypic/serve/chat_service.h"

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
