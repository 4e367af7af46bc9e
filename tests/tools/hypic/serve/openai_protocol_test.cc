// OpenAI request parsing and response building of `hypic serve`: the fields clients send are read with
// their defaults, every malformed field is a 400 naming it, and responses, chunks and usage have
// OpenAI's shapes (what the openai package parses; the end-to-end test runs that package).
#include "tools/hypic/serve/openai_protocol.h"

#include <gtest/gtest.h>

namespace hypic::serve {
namespace {

Json chat(Json extra = Json::object()) {
  Json j = {{"model", "m"}, {"messages", {{{"role", "user"}, {"content", "hi"}}}}};
  for (auto& [k, v] : extra.items()) j[k] = v;
  return j;
}

// The status and the param of the ApiError `f` throws.
template <class F>
std::pair<int, std::string> error_of(F f) {
  try {
    f();
  } catch (const ApiError& e) {
    return {e.status, e.param};
  }
  return {0, "no error"};
}

TEST(OpenAiProtocol, ChatDefaults) {
  ChatRequest r = parse_chat_request(chat());
  EXPECT_EQ(r.model, "m");
  ASSERT_EQ(r.conversation.messages.size(), 1u);
  EXPECT_EQ(r.conversation.messages[0].content, "hi");
  EXPECT_FALSE(r.stream);
  EXPECT_EQ(r.sampling.max_tokens, 256);
  EXPECT_FLOAT_EQ(r.sampling.temperature, 1.0f);
  EXPECT_FALSE(r.sampling.ignore_eos);
  EXPECT_EQ(r.tool_choice, ChatRequest::ToolChoice::Auto);
}

TEST(OpenAiProtocol, ChatFields) {
  Json tools = {{{"type", "function"}, {"function", {{"name", "f"}, {"parameters", {{"type", "object"}}}}}}};
  ChatRequest r = parse_chat_request(chat({{"stream", true},
                                           {"stream_options", {{"include_usage", true}}},
                                           {"max_completion_tokens", 7},
                                           {"temperature", 0},
                                           {"top_p", 0.5},
                                           {"seed", 42},
                                           {"stop", "END"},
                                           {"tools", tools},
                                           {"tool_choice", {{"type", "function"}, {"function", {{"name", "f"}}}}},
                                           {"cache_salt", "s1"},
                                           {"ignore_eos", true},
                                           {"chat_template_kwargs", {{"enable_thinking", false}}}}));
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.include_usage);
  EXPECT_EQ(r.sampling.max_tokens, 7);
  EXPECT_FLOAT_EQ(r.sampling.temperature, 0.0f);
  EXPECT_FLOAT_EQ(r.sampling.top_p, 0.5f);
  EXPECT_EQ(r.sampling.seed, 42u);
  EXPECT_EQ(r.sampling.stop, std::vector<std::string>{"END"});
  EXPECT_EQ(r.tool_choice, ChatRequest::ToolChoice::Named);
  EXPECT_EQ(r.tool_name, "f");
  EXPECT_EQ(r.cache_salt, "s1");
  EXPECT_TRUE(r.sampling.ignore_eos);
  ASSERT_TRUE(r.enable_thinking.has_value());
  EXPECT_FALSE(*r.enable_thinking);
  EXPECT_EQ(r.conversation.tools.size(), 1u);
}

TEST(OpenAiProtocol, ContentPartsJoinAndKeepTheCacheHint) {
  Json msg = {{"role", "user"},
              {"content", {{{"type", "text"}, {"text", "doc A"}, {"cache", true}},
                           {{"type", "text"}, {"text", "question"}}}}};
  ChatRequest r = parse_chat_request({{"messages", {msg}}});
  EXPECT_EQ(r.conversation.messages[0].content, "doc A\nquestion");
  ASSERT_EQ(r.parts[0].size(), 2u);
  EXPECT_TRUE(r.parts[0][0].cache);
  EXPECT_FALSE(r.parts[0][1].cache);
}

TEST(OpenAiProtocol, MalformedFieldsAre400NamingThem) {
  using P = std::pair<int, std::string>;
  EXPECT_EQ(error_of([] { parse_chat_request({{"model", "m"}}); }), P(400, "messages"));
  EXPECT_EQ(error_of([] { parse_chat_request(chat({{"messages", Json::array()}})); }), P(400, "messages"));
  EXPECT_EQ(error_of([] { parse_chat_request(chat({{"max_tokens", 0}})); }), P(400, "max_tokens"));
  EXPECT_EQ(error_of([] { parse_chat_request(chat({{"max_tokens", "5"}})); }), P(400, "max_tokens"));
  EXPECT_EQ(error_of([] { parse_chat_request(chat({{"max_tokens", 18446744073709551615ull}})); }), P(400, "max_tokens"));
  EXPECT_EQ(error_of([] { parse_chat_request(chat({{"temperature", 3}})); }), P(400, "temperature"));
  EXPECT_EQ(error_of([] { parse_chat_request(chat({{"top_p", 0}})); }), P(400, "top_p"));
  EXPECT_EQ(error_of([] { parse_chat_request(chat({{"n", 2}})); }), P(400, "n"));
  EXPECT_EQ(error_of([] { parse_chat_request(chat({{"stop", {1}}})); }), P(400, "stop"));
  EXPECT_EQ(error_of([] { parse_chat_request(chat({{"stream", "yes"}})); }), P(400, "stream"));
  EXPECT_EQ(error_of([] { parse_chat_request(chat({{"tool_choice", "required"}})); }), P(400, "tool_choice"));
  EXPECT_EQ(error_of([] { parse_chat_request(chat({{"tool_choice", "sometimes"}})); }), P(400, "tool_choice"));
  EXPECT_EQ(error_of([] { parse_chat_request(chat({{"tools", {{{"type", "function"}}}}})); }), P(400, "tools"));
  EXPECT_EQ(error_of([] { parse_chat_request({{"messages", {{{"role", "user"}, {"content", 5}}}}}); }).first, 400);
  EXPECT_EQ(error_of([] { parse_body("{not json"); }).first, 400);
  EXPECT_EQ(error_of([] { parse_body("[1, 2]"); }).first, 400);
  EXPECT_EQ(error_of([] { parse_body(std::string(100000, '[')); }).first, 400);  // bounded nesting
  EXPECT_EQ(error_of([] { parse_completion_request({{"prompt", 3}}); }), P(400, "prompt"));
  EXPECT_EQ(error_of([] { parse_completion_request({{"prompt", ""}}); }), P(400, "prompt"));
}

// Token-level controls: logprobs (chat's boolean + top_logprobs, the completions API's integer), the logit
// bias, penalties and top_k are read; what hypic does not do (a JSON response format, echo, suffix,
// best_of > 1) is refused instead of ignored.
TEST(OpenAiProtocol, TokenControls) {
  EXPECT_EQ(parse_chat_request(chat()).sampling.logprobs, -1);
  EXPECT_EQ(parse_chat_request(chat({{"logprobs", true}})).sampling.logprobs, 0);
  EXPECT_EQ(parse_chat_request(chat({{"logprobs", true}, {"top_logprobs", 5}})).sampling.logprobs, 5);
  EXPECT_EQ(parse_chat_request(chat({{"logprobs", false}})).sampling.logprobs, -1);
  EXPECT_EQ(parse_completion_request({{"prompt", "x"}, {"logprobs", 3}}).sampling.logprobs, 3);
  EXPECT_EQ(parse_completion_request({{"prompt", "x"}, {"logprobs", 0}}).sampling.logprobs, 0);
  EXPECT_EQ(parse_completion_request({{"prompt", "x"}}).sampling.logprobs, -1);
  const Sampling s = parse_chat_request(chat({{"logit_bias", {{"12", -100}, {"7", 2.5}}},
                                              {"presence_penalty", 0.5},
                                              {"frequency_penalty", -1.5},
                                              {"top_k", 40},
                                              {"response_format", {{"type", "text"}}},
                                              {"best_of", 1}}))
                         .sampling;
  ASSERT_EQ(s.logit_bias.size(), 2u);
  EXPECT_EQ(s.logit_bias[0], (std::pair<int, float>(12, -100.0f)));
  EXPECT_EQ(s.logit_bias[1], (std::pair<int, float>(7, 2.5f)));
  EXPECT_FLOAT_EQ(s.presence_penalty, 0.5f);
  EXPECT_FLOAT_EQ(s.frequency_penalty, -1.5f);
  EXPECT_EQ(s.top_k, 40);
  EXPECT_EQ(parse_chat_request(chat({{"top_k", -1}})).sampling.top_k, 0);

  using P = std::pair<int, std::string>;
  EXPECT_EQ(error_of([] { parse_chat_request(chat({{"top_logprobs", 2}})); }), P(400, "top_logprobs"));
  EXPECT_EQ(error_of([] { parse_chat_request(chat({{"logprobs", true}, {"top_logprobs", 21}})); }), P(400, "top_logprobs"));
  EXPECT_EQ(error_of([] { parse_chat_request(chat({{"logprobs", 2}})); }), P(400, "logprobs"));
  EXPECT_EQ(error_of([] { parse_completion_request({{"prompt", "x"}, {"logprobs", true}}); }), P(400, "logprobs"));
  EXPECT_EQ(error_of([] { parse_chat_request(chat({{"logit_bias", {{"a1", 1}}}})); }), P(400, "logit_bias"));
  EXPECT_EQ(error_of([] { parse_chat_request(chat({{"logit_bias", {{"-3", 1}}}})); }), P(400, "logit_bias"));
  EXPECT_EQ(error_of([] { parse_chat_request(chat({{"logit_bias", {{"3", 101}}}})); }), P(400, "logit_bias"));
  EXPECT_EQ(error_of([] { parse_chat_request(chat({{"logit_bias", {{"3", "x"}}}})); }), P(400, "logit_bias"));
  EXPECT_EQ(error_of([] { parse_chat_request(chat({{"logit_bias", {1, 2}}})); }), P(400, "logit_bias"));
  EXPECT_EQ(error_of([] { parse_chat_request(chat({{"presence_penalty", 2.5}})); }), P(400, "presence_penalty"));
  EXPECT_EQ(error_of([] { parse_chat_request(chat({{"frequency_penalty", "high"}})); }), P(400, "frequency_penalty"));
  EXPECT_EQ(error_of([] { parse_chat_request(chat({{"top_k", 1.5}})); }), P(400, "top_k"));
  EXPECT_EQ(error_of([] { parse_chat_request(chat({{"response_format", {{"type", "json_object"}}}})); }),
            P(400, "response_format"));
  EXPECT_EQ(error_of([] { parse_chat_request(chat({{"best_of", 3}})); }), P(400, "best_of"));
  EXPECT_EQ(error_of([] { parse_completion_request({{"prompt", "x"}, {"echo", true}}); }), P(400, "echo"));
  EXPECT_EQ(error_of([] { parse_completion_request({{"prompt", "x"}, {"suffix", "end"}}); }), P(400, "suffix"));
  EXPECT_EQ(parse_completion_request({{"prompt", "x"}, {"echo", false}, {"suffix", ""}}).prompt, "x");

  const Sampling m = parse_chat_request(chat({{"min_tokens", 4}, {"max_tokens", 9}, {"stop_token_ids", {7, 11}}})).sampling;
  EXPECT_EQ(m.min_tokens, 4);
  EXPECT_EQ(m.stop_token_ids, (std::vector<int>{7, 11}));
  EXPECT_EQ(error_of([] { parse_chat_request(chat({{"min_tokens", 10}, {"max_tokens", 9}})); }), P(400, "min_tokens"));
  EXPECT_EQ(error_of([] { parse_chat_request(chat({{"min_tokens", -1}})); }), P(400, "min_tokens"));
  EXPECT_EQ(error_of([] { parse_chat_request(chat({{"stop_token_ids", {"a"}}})); }), P(400, "stop_token_ids"));
  EXPECT_EQ(error_of([] { parse_chat_request(chat({{"stop_token_ids", 5}})); }), P(400, "stop_token_ids"));

  Sampling big;
  big.logit_bias = {{5, 1.0f}, {1024, 1.0f}};
  EXPECT_EQ(error_of([&] { check_token_ids(big, 1024); }), P(400, "logit_bias"));
  EXPECT_EQ(error_of([&] { check_token_ids(big, 1025); }), P(0, "no error"));
  big.stop_token_ids = {2000};
  EXPECT_EQ(error_of([&] { check_token_ids(big, 1025); }), P(400, "stop_token_ids"));
}

// A model's generation_config.json gives the defaults of the fields a request leaves out (vLLM's
// --generation-config auto); what a request sets wins; an ill-typed or out-of-range field names the file.
TEST(OpenAiProtocol, GenerationConfigDefaults) {
  const SamplingDefaults d = sampling_defaults({{"do_sample", true}, {"temperature", 0.6}, {"top_p", 0.95},
                                               {"top_k", 20}, {"repetition_penalty", 1.05}, {"max_new_tokens", 64},
                                               {"eos_token_id", {1, 2}}, {"min_p", nullptr}},
                                              "m/generation_config.json");
  EXPECT_EQ(d.from_file, (std::vector<std::string>{"temperature", "top_p", "top_k", "repetition_penalty", "max_new_tokens"}));
  const Sampling c = parse_chat_request(chat(), d).sampling;
  EXPECT_FLOAT_EQ(c.temperature, 0.6f);
  EXPECT_FLOAT_EQ(c.top_p, 0.95f);
  EXPECT_EQ(c.top_k, 20);
  EXPECT_FLOAT_EQ(c.repetition_penalty, 1.05f);
  EXPECT_EQ(c.max_tokens, 64);
  EXPECT_EQ(parse_completion_request({{"prompt", "x"}}, d).sampling.max_tokens, 64);
  const Sampling o = parse_chat_request(chat({{"temperature", 0}, {"top_k", -1}, {"repetition_penalty", 1},
                                              {"max_tokens", 5}}),
                                         d)
                         .sampling;
  EXPECT_FLOAT_EQ(o.temperature, 0.0f);
  EXPECT_EQ(o.top_k, 0);
  EXPECT_FLOAT_EQ(o.repetition_penalty, 1.0f);
  EXPECT_EQ(o.max_tokens, 5);
  const Sampling plain = parse_chat_request(chat()).sampling;  // OpenAI's defaults without a file
  EXPECT_FLOAT_EQ(plain.temperature, 1.0f);
  EXPECT_FLOAT_EQ(plain.repetition_penalty, 1.0f);
  EXPECT_TRUE(sampling_defaults(Json::object(), "g").from_file.empty());

  auto message_of = [](const Json& gc) {
    try {
      sampling_defaults(gc, "m/generation_config.json");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message_of({{"temperature", "hot"}}).find("m/generation_config.json: 'temperature'"), std::string::npos);
  EXPECT_NE(message_of({{"top_p", 0}}).find("'top_p' is out of range"), std::string::npos);
  EXPECT_NE(message_of({{"top_k", 2.5}}).find("'top_k' must be an integer"), std::string::npos);
  EXPECT_NE(message_of({{"repetition_penalty", 0}}).find("'repetition_penalty'"), std::string::npos);
  EXPECT_NE(message_of(Json::array()).find("not a JSON object"), std::string::npos);
  using P = std::pair<int, std::string>;
  EXPECT_EQ(error_of([] { parse_chat_request(chat({{"repetition_penalty", 0}})); }), P(400, "repetition_penalty"));
  EXPECT_EQ(error_of([] { parse_chat_request(chat({{"repetition_penalty", 2.5}})); }), P(400, "repetition_penalty"));
}

// Logprobs on the wire: chat's content entries carry each token's bytes, the completions API's text
// offsets count bytes from where the chunk's text starts.
TEST(OpenAiProtocol, LogprobShapes) {
  const std::vector<LogprobEntry> e = {{"He", -0.5f, {{"He", -0.5f}, {"A", -1.5f}}}, {"\xc3", -2.0f, {}}};
  const Json c = chat_logprobs_json(e);
  ASSERT_EQ(c["content"].size(), 2u);
  EXPECT_EQ(c["content"][0]["token"], "He");
  EXPECT_FLOAT_EQ(c["content"][0]["logprob"].get<float>(), -0.5f);
  EXPECT_EQ(c["content"][0]["bytes"], Json::array({72, 101}));
  ASSERT_EQ(c["content"][0]["top_logprobs"].size(), 2u);
  EXPECT_EQ(c["content"][0]["top_logprobs"][1]["token"], "A");
  EXPECT_EQ(c["content"][1]["bytes"], Json::array({0xc3}));  // half a character: the bytes stay exact
  EXPECT_NE(sse_event(c).find("\ufffd"), std::string::npos);  // and the text is written with a replacement

  const Json l = completion_logprobs_json(e, 10);
  EXPECT_EQ(l["tokens"], Json::array({"He", "\xc3"}));
  EXPECT_EQ(l["text_offset"], Json::array({10, 12}));
  EXPECT_FLOAT_EQ(l["token_logprobs"][1].get<float>(), -2.0f);
  EXPECT_FLOAT_EQ(l["top_logprobs"][0]["A"].get<float>(), -1.5f);
  EXPECT_TRUE(l["top_logprobs"][1].empty());

  ChatReply r;
  r.content = "He";
  r.finish_reason = "stop";
  EXPECT_EQ(chat_completion_json("id", 1, "m", r, Json::object(), c)["choices"][0]["logprobs"], c);
  EXPECT_TRUE(chat_completion_json("id", 1, "m", r, Json::object())["choices"][0]["logprobs"].is_null());
  EXPECT_EQ(completion_chunk_json("id", 1, "m", "He", {}, l)["choices"][0]["logprobs"], l);
}

// hypic's template extension: {"hypic": {"template": NAME, "vars": {...}}}; the messages may then be
// empty, the tools come from the template, and every malformed piece is a 400 naming it.
TEST(OpenAiProtocol, TemplateReference) {
  ChatRequest r = parse_chat_request({{"messages", Json::array()},
                                      {"hypic", {{"template", "qa_docs"}, {"vars", {{"question", "q"}}}}},
                                      {"tool_choice", "required"}});
  ASSERT_TRUE(r.template_ref);
  EXPECT_EQ(r.template_ref->name, "qa_docs");
  EXPECT_EQ(r.template_ref->vars, Json({{"question", "q"}}));
  EXPECT_TRUE(r.conversation.messages.empty());
  EXPECT_EQ(r.tool_choice, ChatRequest::ToolChoice::Required);  // checked against the template's tools later
  EXPECT_EQ(parse_chat_request(chat({{"hypic", {{"template", "t"}}}})).template_ref->vars, Json::object());
  EXPECT_FALSE(parse_chat_request(chat()).template_ref);

  using P = std::pair<int, std::string>;
  EXPECT_EQ(error_of([] { parse_chat_request(chat({{"hypic", "qa_docs"}})); }), P(400, "hypic"));
  EXPECT_EQ(error_of([] { parse_chat_request(chat({{"hypic", {{"vars", Json::object()}}}})); }), P(400, "hypic.template"));
  EXPECT_EQ(error_of([] { parse_chat_request(chat({{"hypic", {{"template", 3}}}})); }), P(400, "hypic.template"));
  EXPECT_EQ(error_of([] { parse_chat_request(chat({{"hypic", {{"template", ""}}}})); }), P(400, "hypic.template"));
  EXPECT_EQ(error_of([] { parse_chat_request(chat({{"hypic", {{"template", "t"}, {"vars", Json::array()}}}})); }),
            P(400, "hypic.vars"));
  EXPECT_EQ(error_of([] { parse_chat_request(chat({{"hypic", {{"template", "t"}, {"varz", Json::object()}}}})); }),
            P(400, "hypic.varz"));
  const Json tool = {{"type", "function"}, {"function", {{"name", "f"}}}};
  EXPECT_EQ(error_of([&] { parse_chat_request(chat({{"hypic", {{"template", "t"}}}, {"tools", {tool}}})); }),
            P(400, "tools"));
  // Without a template the messages must not be empty.
  EXPECT_EQ(error_of([] { parse_chat_request({{"messages", Json::array()}}); }), P(400, "messages"));
}

TEST(OpenAiProtocol, CompletionRequest) {
  CompletionRequest r = parse_completion_request({{"model", "m"}, {"prompt", {"abc"}}, {"max_tokens", 3}});
  EXPECT_EQ(r.prompt, "abc");
  EXPECT_EQ(r.sampling.max_tokens, 3);
  EXPECT_EQ(parse_completion_request({{"prompt", "x"}}).sampling.max_tokens, 16);  // OpenAI's default
}

TEST(OpenAiProtocol, ErrorShape) {
  const Json j = error_body(ApiError(429, "rate_limit_exceeded", "busy"));
  EXPECT_EQ(j["error"]["message"], "busy");
  EXPECT_EQ(j["error"]["type"], "rate_limit_exceeded");
  EXPECT_TRUE(j["error"]["param"].is_null());
  EXPECT_TRUE(j["error"].contains("code"));
  EXPECT_EQ(error_body(bad_request("bad", "top_p"))["error"]["param"], "top_p");
}

TEST(OpenAiProtocol, UsageCountsCachedTokensAndBlocks) {
  PromptReport p;
  p.prompt_tokens = 100;
  p.computed_tokens = 30;
  p.reused_tokens = 40;
  p.blocks = {{"system", 40, true}, {"document", 30, true}, {"message", 25, false}, {"template", 9, true, "doc.a1"}};
  const Json u = usage_json(p, 5);
  EXPECT_EQ(u["prompt_tokens"], 100);
  EXPECT_EQ(u["completion_tokens"], 5);
  EXPECT_EQ(u["total_tokens"], 105);
  EXPECT_EQ(u["prompt_tokens_details"]["cached_tokens"], 70);
  EXPECT_EQ(u["hypic"]["computed_tokens"], 30);
  ASSERT_EQ(u["hypic"]["blocks"].size(), 4u);
  EXPECT_EQ(u["hypic"]["blocks"][1]["kind"], "document");
  EXPECT_FALSE(u["hypic"]["blocks"][1].contains("id"));  // only template blocks have ids
  EXPECT_EQ(u["hypic"]["blocks"][2]["hit"], false);
  EXPECT_EQ(u["hypic"]["blocks"][3], Json({{"kind", "template"}, {"id", "doc.a1"}, {"tokens", 9}, {"hit", true}}));
}

TEST(OpenAiProtocol, ResponsesAndChunks) {
  ChatReply reply;
  reply.tool_calls = {{"call_1", "f", "{\"x\":1}"}};
  reply.finish_reason = "tool_calls";
  const Json c = chat_completion_json("id1", 5, "m", reply, Json::object());
  EXPECT_EQ(c["object"], "chat.completion");
  EXPECT_TRUE(c["choices"][0]["message"]["content"].is_null());  // OpenAI: null content beside tool calls
  EXPECT_EQ(c["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"], "{\"x\":1}");
  EXPECT_EQ(c["choices"][0]["finish_reason"], "tool_calls");
  const Json k = chat_chunk_json("id1", 5, "m", {{"content", "a"}});
  EXPECT_EQ(k["object"], "chat.completion.chunk");
  EXPECT_TRUE(k["choices"][0]["finish_reason"].is_null());
  EXPECT_EQ(chat_chunk_json("id1", 5, "m", Json::object(), "stop")["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(usage_chunk_json("id1", 5, "m", "chat.completion.chunk", {{"prompt_tokens", 1}})["choices"].size(), 0u);
  EXPECT_EQ(sse_event({{"a", 1}}), "data: {\"a\":1}\n\n");
  EXPECT_EQ(sse_event({{"a", std::string("\xff")}}).find("\xff"), std::string::npos);  // invalid UTF-8 replaced
  EXPECT_EQ(models_json("m", 1)["data"][0]["id"], "m");
  EXPECT_EQ(finish_reason("length", false), "length");
  EXPECT_EQ(finish_reason("stop", true), "tool_calls");
}

}  // namespace
}  // namespace hypic::serve
