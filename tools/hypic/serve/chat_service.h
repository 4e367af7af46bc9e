// What `hypic serve` does with a request between the wire and the engine thread: renders a chat request
// with the model's chat format and splits it into prompt blocks (request_blocks.h), tokenizes a
// completion prompt, and turns a reply's streamed text back into OpenAI's pieces (content, reasoning,
// tool calls) with the format's streaming tool-call parser.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "runtime/engine.h"
#include "runtime/text/chat_format.h"
#include "runtime/text/tokenizer.h"
#include "tools/hypic/serve/openai_protocol.h"
#include "tools/hypic/serve/template_catalog.h"

namespace hypic::serve {

struct PreparedPrompt {
  std::vector<PromptBlock> blocks;
  std::vector<std::string> kinds;  // per block but the query tail
  std::vector<std::string> ids;    // per block but the query tail: a template block's id, else empty
  // The chat reply's parser settings.
  Json tools = Json::array();  // the tools the prompt offered (empty: tool calls are not parsed)
  bool starts_in_reasoning = false;
  std::string forced;  // text the reply was made to start with (tool_choice required / named)
};

// Throws ApiError (400) for a conversation the format cannot express or a prompt that does not fit.
PreparedPrompt prepare_chat(const ChatRequest& req, const ChatFormat& format, const Tokenizer& tok);
// A request naming a server-side template (req.template_ref): the template rendered with its vars,
// one block per template block (its cache policy kept), then the request's messages split as in
// prepare_chat, then the generation prompt. ApiError 404 for an unknown template, 400 naming the
// variable (param hypic.vars.NAME) for a missing, undeclared or ill-typed one.
PreparedPrompt prepare_template_chat(const ChatRequest& req, const TemplateCatalog& templates, const ChatFormat& format,
                                     const Tokenizer& tok);
PreparedPrompt prepare_completion(const CompletionRequest& req, const Tokenizer& tok);

// Accumulates a chat reply from its streamed text and says what each new piece adds as OpenAI deltas
// ({"content": ...}, {"reasoning_content": ...}, {"tool_calls": [...]}).
class ReplyAssembler {
 public:
  ReplyAssembler(const ChatFormat& format, const PreparedPrompt& prompt, std::string call_id_prefix);
  std::vector<Json> push(std::string_view text);
  std::vector<Json> finish();
  // The whole reply; finish_reason from the engine's finish (stop, length, cancelled).
  ChatReply reply(const std::string& engine_finish) const;

 private:
  std::vector<Json> take(std::vector<ReplyEvent>& events);

  std::unique_ptr<ToolCallStreamParser> parser_;
  std::string prefix_;
  ChatReply reply_;
  std::vector<ToolCallError> errors_;
};

}  // namespace hypic::serve
