// Splitting a plain OpenAI request into prompt blocks, so the engine's position-independent cache serves
// clients that know nothing of it: the system turn (with the tool docs), each message, and each content
// part a client marked as a retrieved document are blocks of their own, so the same document, tool docs
// or earlier message reused in another request, at another position or in another order, is a hit.
#pragma once
#include <string>
#include <vector>

#include "runtime/engine.h"
#include "runtime/text/chat_format.h"
#include "tools/hypic/serve/openai_protocol.h"

namespace hypic::serve {

// A piece of the rendered prompt text; the pieces tile it in order.
struct TextBlock {
  std::string kind;  // system | tools | message | document | prompt (the query tail)
  std::string text;
};

// Splits `chat` (the rendering of `conv`, whose message i has content `parts[i]`) into blocks (kinds: a
// system message is "system", the tool docs "tools", other messages "message"):
// leading text joins the block after it; each message span is one block, cut around its parts marked
// `cache` when the content lies verbatim in the text; the generation prompt (plus `forced`, text the
// reply is made to start with) is the query tail, always last and non-empty.
std::vector<TextBlock> split_rendered_chat(const RenderedChat& chat, const Conversation& conv,
                                           const std::vector<std::vector<ContentPart>>& parts,
                                           const std::string& forced = {});

}  // namespace hypic::serve
