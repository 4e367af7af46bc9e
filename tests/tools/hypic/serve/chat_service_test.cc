// From a request to prompt blocks and from a reply's streamed text back to OpenAI's pieces, on both
// tool-call formats (Qwen3's JSON bodies, Qwen3.5's XML bodies): tool calls arrive as one delta each
// whatever the split of the stream, the forced opening of tool_choice is not shown to the client, and a
// malformed call comes back as text.
#include "tools/hypic/serve/chat_service.h"

#include <gtest/gtest.h>

#include "runtime/regular_file.h"

namespace hypic::serve {
namespace {

std::unique_ptr<ChatFormat> format(const std::string& file) {
  const std::string path = std::string(HYPIC_SOURCE_DIR) + "/tests/fixtures/chat/" + file;
  return make_chat_format(read_regular_file(path, "chat template"), path);
}

const Tokenizer& tokenizer() {
  static const Tokenizer tok =
      Tokenizer::from_file(std::string(HYPIC_SOURCE_DIR) + "/examples/models/hypic-qa-tiny/tokenizer.json");
  return tok;
}

Json tools() {
  return {{{"type", "function"},
           {"function", {{"name", "lookup"},
                         {"parameters", {{"type", "object"}, {"properties", {{"word", {{"type", "string"}}}}}}}}}}};
}

ChatRequest request(const std::string& tool_choice) {
  return parse_chat_request({{"messages", {{{"role", "user"}, {"content", "Define Paris."}}}},
                             {"tools", tools()},
                             {"tool_choice", tool_choice},
                             {"chat_template_kwargs", {{"enable_thinking", false}}}});
}

struct Case {
  const char* file;
  const char* call;  // a whole call as the format writes it
};

class ChatService : public ::testing::TestWithParam<Case> {};

// Feeds `text` in pieces of `n` bytes; returns every delta.
std::vector<Json> feed(ReplyAssembler& a, const std::string& text, size_t n) {
  std::vector<Json> out;
  for (size_t i = 0; i < text.size(); i += n)
    for (auto& d : a.push(std::string_view(text).substr(i, n))) out.push_back(d);
  for (auto& d : a.finish()) out.push_back(d);
  return out;
}

TEST_P(ChatService, ToolCallIsOneDeltaWhateverTheSplit) {
  auto f = format(GetParam().file);
  const PreparedPrompt p = prepare_chat(request("auto"), *f, tokenizer());
  for (size_t n : {1, 3, 7, 1000}) {
    ReplyAssembler a(*f, p, "call_x_");
    const std::vector<Json> deltas = feed(a, std::string("Let me look.\n") + GetParam().call, n);
    std::string content;
    int calls = 0;
    for (auto& d : deltas) {
      if (d.contains("content")) content += d["content"].get<std::string>();
      if (d.contains("tool_calls")) {
        ++calls;
        EXPECT_EQ(d["tool_calls"][0]["function"]["name"], "lookup");
        EXPECT_EQ(Json::parse(d["tool_calls"][0]["function"]["arguments"].get<std::string>()), Json({{"word", "Paris"}}));
        EXPECT_EQ(d["tool_calls"][0]["id"], "call_x_0");
      }
    }
    EXPECT_EQ(calls, 1) << "piece size " << n;
    EXPECT_EQ(content.substr(0, 12), "Let me look.");
    const ChatReply r = a.reply("stop");
    EXPECT_EQ(r.finish_reason, "tool_calls");
    ASSERT_EQ(r.tool_calls.size(), 1u);
  }
}

TEST_P(ChatService, RequiredToolChoiceForcesTheCallOpening) {
  auto f = format(GetParam().file);
  const PreparedPrompt p = prepare_chat(request("required"), *f, tokenizer());
  EXPECT_EQ(p.forced, "<tool_call>\n");
  const std::vector<int> tail = p.blocks.back().tokens;
  EXPECT_EQ(tokenizer().decode(tail).substr(tokenizer().decode(tail).size() - 12), "<tool_call>\n");
  ReplyAssembler a(*f, p, "c");
  // The model continues after the forced opening.
  const std::string call = GetParam().call;
  const std::vector<Json> deltas = feed(a, call.substr(call.find('\n') + 1), 5);
  ASSERT_EQ(deltas.size(), 1u);
  EXPECT_TRUE(deltas[0].contains("tool_calls"));
}

TEST_P(ChatService, NoneHidesTheToolsAndParsesNoCall) {
  auto f = format(GetParam().file);
  const PreparedPrompt p = prepare_chat(request("none"), *f, tokenizer());
  EXPECT_TRUE(p.tools.empty());
  std::string prompt;
  for (auto& b : p.blocks) prompt += tokenizer().decode(b.tokens);
  EXPECT_EQ(prompt.find("lookup"), std::string::npos);
}

TEST_P(ChatService, MalformedCallComesBackAsText) {
  auto f = format(GetParam().file);
  const PreparedPrompt p = prepare_chat(request("auto"), *f, tokenizer());
  ReplyAssembler a(*f, p, "c");
  std::string content;
  for (auto& d : feed(a, "<tool_call>\nnot a call\n</tool_call>", 4)) content += d.value("content", "");
  EXPECT_NE(content.find("not a call"), std::string::npos);
  EXPECT_TRUE(a.reply("stop").tool_calls.empty());
  EXPECT_EQ(a.reply("stop").finish_reason, "stop");
}

INSTANTIATE_TEST_SUITE_P(
    BothFormats, ChatService,
    ::testing::Values(Case{"qwen3_chat_template.jinja",
                           "<tool_call>\n{\"name\": \"lookup\", \"arguments\": {\"word\": \"Paris\"}}\n</tool_call>"},
                      Case{"qwen3.5_chat_template.jinja",
                           "<tool_call>\n<function=lookup>\n<parameter=word>\nParis\n</parameter>\n</function>\n</tool_call>"}));

TEST(ChatServiceErrors, ConversationTheFormatCannotExpressIs400) {
  auto f = format("qwen3_chat_template.jinja");
  const ChatRequest r = parse_chat_request({{"messages", {{{"role", "wizard"}, {"content", "x"}}}}});
  try {
    prepare_chat(r, *f, tokenizer());
    FAIL() << "accepted an unknown role";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status, 400);
    EXPECT_EQ(e.param, "messages");
  }
}

TEST(ChatServiceCompletion, PromptTokenizedWholeAndLastTokenIsTheQuery) {
  const PreparedPrompt p = prepare_completion(parse_completion_request({{"prompt", "The capital of France is"}}), tokenizer());
  const std::vector<int> whole = tokenizer().encode("The capital of France is");
  ASSERT_EQ(p.blocks.size(), 2u);
  std::vector<int> joined = p.blocks[0].tokens;
  joined.push_back(p.blocks[1].tokens.at(0));
  EXPECT_EQ(joined, whole);
  EXPECT_EQ(p.blocks[1].cache, BlockCache::None);
}

}  // namespace
}  // namespace hypic::serve
