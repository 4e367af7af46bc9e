// Request bodies of `hypic serve` -> the OpenAI request parsers, then (for requests they accept) the
// Qwen3 rendering and the block splitting. Only ApiError (and the chat format's typed refusals) may be
// thrown; the blocks must tile the rendered prompt and end with a non-empty query tail.
#include "tests/fuzz/fuzz_util.h"
#include "tools/hypic/serve/request_blocks.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace hypic::serve;
  const std::string text(hypic::fuzz::as_text(data, size));
  Json body;
  try {
    body = parse_body(text);
  } catch (const ApiError&) {
    return 0;
  }
  try {
    parse_completion_request(body);
  } catch (const ApiError&) {
  }
  ChatRequest r;
  try {
    r = parse_chat_request(body);
  } catch (const ApiError&) {
    return 0;
  }
  hypic::RenderedChat chat;
  try {
    chat = hypic::default_chat_format().render(r.conversation, hypic::RenderOptions{});
  } catch (const hypic::Error&) {  // a conversation the format cannot express: the server's 400
    return 0;
  }
  const std::vector<TextBlock> blocks = split_rendered_chat(chat, r.conversation, r.parts, "<tool_call>\n");
  std::string joined;
  for (const auto& b : blocks) joined += b.text;
  if (blocks.empty() || blocks.back().text.empty() || joined != chat.text + "<tool_call>\n") __builtin_trap();
  return 0;
}
