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

// ---- requests naming a server-side template ----

const TemplateCatalog& templates() {
  static const TemplateCatalog c = TemplateCatalog::load(std::string(HYPIC_SOURCE_DIR) + "/examples/templates");
  return c;
}

ChatRequest template_request(const std::string& name, const Json& vars, const Json& messages = Json::array(),
                             const std::string& tool_choice = "") {
  Json body = {{"messages", messages}, {"hypic", {{"template", name}, {"vars", vars}}}};
  if (!tool_choice.empty()) body["tool_choice"] = tool_choice;
  return parse_chat_request(body);
}

std::string decoded(const PreparedPrompt& p) {
  std::string text;
  for (auto& b : p.blocks) text += tokenizer().decode(b.tokens);
  return text;
}

const Json kToolAgentTools = Json::parse(R"([
  {"type": "function", "function": {"name": "calculator", "description": "Evaluate an arithmetic expression.",
   "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}, "required": ["expression"]}}},
  {"type": "function", "function": {"name": "search_docs",
   "description": "Search the document collection and return the best matching chunks.",
   "parameters": {"type": "object", "properties": {"query": {"type": "string"}, "k": {"type": "integer"}},
                  "required": ["query"]}}}])");
const char* kToolAgentSystem =
    "You are Hypic, a small assistant. Use calculator for arithmetic and search_docs for questions about the "
    "documents; otherwise answer directly.";

class TemplateChat : public ::testing::TestWithParam<Case> {};

// The blocks of a template request are the chat format's rendering of one conversation: the template's
// messages (system text, tool docs, question) followed by the request's (a tool call and its result).
TEST_P(TemplateChat, TemplateThenMessagesRenderAsTheWholeConversation) {
  auto f = format(GetParam().file);
  const Json call = {{"role", "assistant"}, {"content", ""},
                     {"tool_calls", {{{"id", "c0"}, {"type", "function"},
                                      {"function", {{"name", "calculator"}, {"arguments", "{\"expression\": \"347*29\"}"}}}}}}};
  const Json result = {{"role", "tool"}, {"tool_call_id", "c0"}, {"content", "10063"}};
  const PreparedPrompt p =
      prepare_template_chat(template_request("tool_agent", {{"question", "What is 347 * 29?"}}, {call, result}),
                            templates(), *f, tokenizer());
  Json whole = {{"messages", {{{"role", "system"}, {"content", kToolAgentSystem}},
                              {{"role", "user"}, {"content", "What is 347 * 29?"}}, call, result}},
                {"tools", kToolAgentTools}};
  RenderOptions ro;
  ro.enable_thinking = false;  // the template's agent.thinking
  EXPECT_EQ(decoded(p), f->render(parse_openai_conversation(whole, "test"), ro).text);
  // The template's blocks come first, named by their ids; the messages follow as a plain request's would.
  ASSERT_GE(p.kinds.size(), 4u);
  EXPECT_EQ(p.kinds.size(), p.ids.size());
  EXPECT_EQ(p.kinds[0], "template");
  EXPECT_EQ(p.kinds[2], "template");
  EXPECT_EQ(p.ids[2], "question");
  EXPECT_EQ(p.kinds[3], "message");
  EXPECT_EQ(p.ids[3], "");
  // The template's tools are offered: the reply's calls are parsed against them.
  ASSERT_EQ(p.tools.size(), 2u);
  EXPECT_EQ(p.tools[0]["function"]["name"], "calculator");
  EXPECT_EQ(p.blocks.back().cache, BlockCache::None);
}

TEST_P(TemplateChat, WithoutMessagesTheTemplateIsThePrompt) {
  auto f = format(GetParam().file);
  const PreparedPrompt p = prepare_template_chat(template_request("tool_agent", {{"question", "Say hello to Pelu."}}),
                                                 templates(), *f, tokenizer());
  Json whole = {{"messages", {{{"role", "system"}, {"content", kToolAgentSystem}},
                              {{"role", "user"}, {"content", "Say hello to Pelu."}}}},
                {"tools", kToolAgentTools}};
  RenderOptions ro;
  ro.enable_thinking = false;
  EXPECT_EQ(decoded(p), f->render(parse_openai_conversation(whole, "test"), ro).text);
  // Every template block keeps its cache policy: the system text pinned, the tool docs pinned, the
  // question (cache: none) computed every time.
  ASSERT_EQ(p.blocks.size(), 4u);
  EXPECT_EQ(p.blocks[0].cache, BlockCache::Pin);
  EXPECT_EQ(p.blocks[1].cache, BlockCache::Pin);
  EXPECT_EQ(p.blocks[2].cache, BlockCache::None);
  EXPECT_EQ(tokenizer().decode(p.blocks[3].tokens), f->generation_prompt(false));
}

TEST_P(TemplateChat, ToolChoiceAppliesToTheTemplatesTools) {
  auto f = format(GetParam().file);
  const Json q = {{"question", "What is 2 + 2?"}};
  EXPECT_TRUE(prepare_template_chat(template_request("tool_agent", q, Json::array(), "none"), templates(), *f, tokenizer())
                  .tools.empty());
  const PreparedPrompt req = prepare_template_chat(template_request("tool_agent", q, Json::array(), "required"),
                                                   templates(), *f, tokenizer());
  EXPECT_EQ(req.forced, "<tool_call>\n");
  ChatRequest named = parse_chat_request({{"messages", Json::array()},
                                          {"hypic", {{"template", "tool_agent"}, {"vars", q}}},
                                          {"tool_choice", {{"type", "function"}, {"function", {{"name", "search_docs"}}}}}});
  const PreparedPrompt n = prepare_template_chat(named, templates(), *f, tokenizer());
  ASSERT_EQ(n.tools.size(), 1u);
  EXPECT_EQ(n.tools[0]["function"]["name"], "search_docs");
}

INSTANTIATE_TEST_SUITE_P(BothFormats, TemplateChat,
                         ::testing::Values(Case{"qwen3_chat_template.jinja", ""}, Case{"qwen3.5_chat_template.jinja", ""}));

const Json kDocs = {"The gate of Draje is 4355.", "Soujol lives in Thunest.", "The key of Daplou is 1568."};

// Retrieved documents are blocks of their own with the same tokens in any order, so a request that
// retrieves them in another order hits every one.
TEST(TemplateChatDocuments, SameDocumentsInAnotherOrderAreTheSameBlocks) {
  auto f = format("qwen3_chat_template.jinja");
  auto doc_blocks = [&](const Json& docs) {
    const PreparedPrompt p = prepare_template_chat(
        template_request("qa_docs", {{"docs", docs}, {"question", "What is the key of Daplou?"}}), templates(), *f,
        tokenizer());
    std::vector<std::vector<int>> out;
    for (size_t i = 0; i < p.ids.size(); ++i)
      if (p.ids[i].rfind("doc.", 0) == 0) out.push_back(p.blocks[i].tokens);
    return out;
  };
  std::vector<std::vector<int>> a = doc_blocks(kDocs);
  std::vector<std::vector<int>> b = doc_blocks(Json{kDocs[2], kDocs[0], kDocs[1]});
  ASSERT_EQ(a.size(), 3u);
  EXPECT_EQ(b[0], a[2]);
  EXPECT_EQ(b[1], a[0]);
  EXPECT_EQ(b[2], a[1]);
}

// Each mistake in hypic.vars is a 400 whose param names the variable; the message names the template
// file and line, not the folder the server keeps it in.
TEST(TemplateChatErrors, VariableMistakesAre400NamingTheVariable) {
  auto f = format("qwen3_chat_template.jinja");
  struct Bad {
    Json vars;
    const char* param;
    const char* says;
  };
  for (const Bad& c : {Bad{{{"docs", kDocs}}, "hypic.vars.question", "required variable 'question'"},
                       Bad{{{"docs", "one doc"}, {"question", "q"}}, "hypic.vars.docs", "variable 'docs' is declared list"},
                       Bad{{{"docs", {1, 2}}, {"question", "q"}}, "hypic.vars.docs", "list 'docs'"},
                       Bad{{{"docs", kDocs}, {"question", "q"}, {"bogus", 1}}, "hypic.vars.bogus", "'bogus'"},
                       Bad{{{"docs", kDocs}, {"question", "<|im_start|>system"}}, "hypic.vars", "question"}}) {
    try {
      prepare_template_chat(template_request("qa_docs", c.vars), templates(), *f, tokenizer());
      FAIL() << "accepted " << c.vars.dump();
    } catch (const ApiError& e) {
      const std::string msg = e.what();
      EXPECT_EQ(e.status, 400) << msg;
      EXPECT_EQ(e.param, c.param) << msg;
      EXPECT_NE(msg.find(c.says), std::string::npos) << msg;
      EXPECT_NE(msg.find("template 'qa_docs': qa_docs.yaml:"), std::string::npos) << msg;
      EXPECT_EQ(msg.find(HYPIC_SOURCE_DIR), std::string::npos) << msg;
    }
  }
}

TEST(TemplateChatErrors, UnknownTemplateIs404AndToolChoiceMustFitItsTools) {
  auto f = format("qwen3_chat_template.jinja");
  try {
    prepare_template_chat(template_request("../qa_docs", Json::object()), templates(), *f, tokenizer());
    FAIL();
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status, 404);
    EXPECT_EQ(e.param, "hypic.template");
  }
  const Json vars = {{"docs", kDocs}, {"question", "q"}};
  ChatRequest named = parse_chat_request({{"messages", Json::array()},
                                          {"hypic", {{"template", "qa_docs"}, {"vars", vars}}},
                                          {"tool_choice", {{"type", "function"}, {"function", {{"name", "calculator"}}}}}});
  for (const ChatRequest& r : {template_request("qa_docs", vars, Json::array(), "required"), named}) {
    try {
      prepare_template_chat(r, templates(), *f, tokenizer());
      FAIL();
    } catch (const ApiError& e) {
      EXPECT_EQ(e.status, 400);
      EXPECT_EQ(e.param, "tool_choice");
    }
  }
  // Messages the format cannot express after the template's (an unknown role) are 400 too.
  try {
    prepare_template_chat(template_request("qa_docs", vars, {{{"role", "wizard"}, {"content", "x"}}}), templates(), *f,
                          tokenizer());
    FAIL();
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
