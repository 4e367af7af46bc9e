// Splitting rendered chats into prompt blocks, on both real chat formats (Qwen3's and Qwen3.5's
// templates, rendered natively and byte-exact by runtime/text): the blocks tile the prompt exactly, the
// system turn with the tool docs, each message and each document part marked `cache` are blocks of their
// own, and the same document gives the same block wherever it appears.
#include "tools/hypic/serve/request_blocks.h"

#include <gtest/gtest.h>

#include "runtime/regular_file.h"

namespace hypic::serve {
namespace {

std::unique_ptr<ChatFormat> format(const std::string& file) {
  const std::string path = std::string(HYPIC_SOURCE_DIR) + "/tests/fixtures/chat/" + file;
  return make_chat_format(read_regular_file(path, "chat template"), path);
}

ChatRequest request(const std::vector<std::string>& docs, bool with_tools) {
  Json parts = Json::array();
  for (auto& d : docs) parts.push_back({{"type", "text"}, {"text", d}, {"cache", true}});
  parts.push_back({{"type", "text"}, {"text", "Which city is mentioned?"}});
  Json body = {{"messages",
                {{{"role", "system"}, {"content", "You are terse."}},
                 {{"role", "user"}, {"content", "Hello"}},
                 {{"role", "assistant"}, {"content", "Hi."}},
                 {{"role", "user"}, {"content", parts}}}}};
  if (with_tools)
    body["tools"] = {{{"type", "function"},
                      {"function", {{"name", "lookup"}, {"description", "Look a word up."},
                                    {"parameters", {{"type", "object"}, {"properties", {{"word", {{"type", "string"}}}}}}}}}}};
  return parse_chat_request(body);
}

std::vector<TextBlock> split(const ChatFormat& f, const ChatRequest& r, const std::string& forced = {}) {
  return split_rendered_chat(f.render(r.conversation, RenderOptions{}), r.conversation, r.parts, forced);
}

class RequestBlocks : public ::testing::TestWithParam<const char*> {};

TEST_P(RequestBlocks, TileThePromptWithOneBlockPerPiece) {
  auto f = format(GetParam());
  for (bool tools : {false, true}) {
    const ChatRequest r = request({"Doc one: Paris is big.", "Doc two: Oslo is cold."}, tools);
    const RenderedChat chat = f->render(r.conversation, RenderOptions{});
    const std::vector<TextBlock> blocks = split_rendered_chat(chat, r.conversation, r.parts, "");
    std::string joined;
    for (auto& b : blocks) joined += b.text;
    EXPECT_EQ(joined, chat.text);
    ASSERT_GE(blocks.size(), 6u);
    EXPECT_EQ(blocks.back().kind, "prompt");
    EXPECT_EQ(blocks.back().text, chat.text.substr(chat.generation_prompt.begin));
    // The system turn: the system text is a "system" block, the tool docs (before or after it, by the
    // family) a "tools" block.
    int system = 0, tool_docs = 0;
    for (auto& b : blocks) {
      system += b.kind == "system" && b.text.find("You are terse.") != std::string::npos;
      tool_docs += b.kind == "tools" && b.text.find("lookup") != std::string::npos;
    }
    EXPECT_EQ(system, 1);
    EXPECT_EQ(tool_docs, tools ? 1 : 0);
    EXPECT_TRUE(blocks[0].kind == "system" || blocks[0].kind == "tools") << blocks[0].kind;
    int documents = 0;
    for (auto& b : blocks) documents += b.kind == "document";
    EXPECT_EQ(documents, 2);
    // The documents are exactly their text and the joining newline.
    bool one = false, two = false;
    for (auto& b : blocks) {
      one |= b.kind == "document" && b.text == "Doc one: Paris is big.\n";
      two |= b.kind == "document" && b.text == "Doc two: Oslo is cold.\n";
    }
    EXPECT_TRUE(one && two);
  }
}

TEST_P(RequestBlocks, SameDocumentSameBlockInAnotherOrder) {
  auto f = format(GetParam());
  const auto a = split(*f, request({"Doc one: Paris is big.", "Doc two: Oslo is cold."}, true));
  const auto b = split(*f, request({"Doc two: Oslo is cold.", "Doc one: Paris is big."}, true));
  std::vector<std::string> da, db;
  for (auto& x : a)
    if (x.kind == "document") da.push_back(x.text);
  for (auto& x : b)
    if (x.kind == "document") db.insert(db.begin(), x.text);
  EXPECT_EQ(da, db);
  EXPECT_EQ(a[0].text, b[0].text);  // the system turn with the tool docs is shared
}

TEST_P(RequestBlocks, ForcedTextEndsTheQueryTail) {
  auto f = format(GetParam());
  const auto blocks = split(*f, request({}, true), "<tool_call>\n");
  const std::string& tail = blocks.back().text;
  ASSERT_GE(tail.size(), 12u);
  EXPECT_EQ(tail.substr(tail.size() - 12), "<tool_call>\n");
}

TEST_P(RequestBlocks, UnmarkedPartsStayInTheirMessage) {
  auto f = format(GetParam());
  ChatRequest r = parse_chat_request({{"messages", {{{"role", "user"}, {"content", {{{"type", "text"}, {"text", "a"}},
                                                                                   {{"type", "text"}, {"text", "b"}}}}}}}});
  const auto blocks = split(*f, r);
  ASSERT_EQ(blocks.size(), 2u);  // the message, the generation prompt
  EXPECT_NE(blocks[0].text.find("a\nb"), std::string::npos);
}

INSTANTIATE_TEST_SUITE_P(BothFormats, RequestBlocks,
                         ::testing::Values("qwen3_chat_template.jinja", "qwen3.5_chat_template.jinja"));

}  // namespace
}  // namespace hypic::serve
