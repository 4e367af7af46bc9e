#include "tools/hypic/serve/openai_protocol.h"

#include <cmath>
#include <limits>

#include "sdk/session.h"  // kMaxTopLogprobs: what the sampler gives, header only

namespace hypic::serve {

ApiError bad_request(const std::string& message, const std::string& param) {
  return ApiError(400, "invalid_request_error", message, param);
}

Json error_body(const ApiError& e) {
  Json err = {{"message", e.what()}, {"type", e.type}};
  err["param"] = e.param.empty() ? Json(nullptr) : Json(e.param);
  err["code"] = nullptr;
  return Json{{"error", err}};
}

Json parse_body(const std::string& text) {
  Json j;
  // Bounded nesting (the model-output parser's guard): a deeply nested body must not recurse the stack.
  if (!parse_bounded_json(text, &j)) throw bad_request("the request body is not valid JSON");
  if (!j.is_object()) throw bad_request("the request body must be a JSON object");
  return j;
}

namespace {

const Json* field(const Json& body, const char* name) {
  auto it = body.find(name);
  if (it == body.end() || it->is_null()) return nullptr;
  return &*it;
}

std::string get_string(const Json& body, const char* name, const std::string& dflt = {}) {
  const Json* f = field(body, name);
  if (!f) return dflt;
  if (!f->is_string()) throw bad_request(std::string("'") + name + "' must be a string", name);
  return f->get<std::string>();
}

bool get_bool(const Json& body, const char* name, bool dflt) {
  const Json* f = field(body, name);
  if (!f) return dflt;
  if (!f->is_boolean()) throw bad_request(std::string("'") + name + "' must be true or false", name);
  return f->get<bool>();
}

double get_number(const Json& body, const char* name, double dflt, double lo, double hi) {
  const Json* f = field(body, name);
  if (!f) return dflt;
  if (!f->is_number()) throw bad_request(std::string("'") + name + "' must be a number", name);
  const double v = f->get<double>();
  if (!std::isfinite(v) || v < lo || v > hi)
    throw bad_request(std::string("'") + name + "' must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]",
                      name);
  return v;
}

int64_t get_int(const Json& body, const char* name, int64_t dflt, int64_t lo, int64_t hi) {
  const Json* f = field(body, name);
  if (!f) return dflt;
  if (!f->is_number_integer()) throw bad_request(std::string("'") + name + "' must be an integer", name);
  // Unsigned values above int64's range arrive as uint64.
  if (f->is_number_unsigned() && f->get<uint64_t>() > static_cast<uint64_t>(hi))
    throw bad_request(std::string("'") + name + "' must be at most " + std::to_string(hi), name);
  const int64_t v = f->get<int64_t>();
  if (v < lo || v > hi)
    throw bad_request(std::string("'") + name + "' must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]",
                      name);
  return v;
}

constexpr int64_t kMaxTokensLimit = 1 << 20;

// `chat`: logprobs is a boolean with top_logprobs beside it; otherwise (completions) an integer.
Sampling parse_sampling(const Json& body, int default_max_tokens, bool chat, const SamplingDefaults& d) {
  Sampling s;
  if (d.max_tokens > 0) default_max_tokens = d.max_tokens;
  const Json* mct = field(body, "max_completion_tokens");
  s.max_tokens = static_cast<int>(mct ? get_int(body, "max_completion_tokens", 0, 1, kMaxTokensLimit)
                                      : get_int(body, "max_tokens", default_max_tokens, 1, kMaxTokensLimit));
  s.temperature = static_cast<float>(get_number(body, "temperature", d.temperature, 0.0, 2.0));
  s.top_p = static_cast<float>(get_number(body, "top_p", d.top_p, 0.0, 1.0));
  if (s.top_p <= 0.0f) throw bad_request("'top_p' must be greater than 0", "top_p");
  s.top_k = static_cast<int>(get_int(body, "top_k", d.top_k, -1, 1 << 30));
  if (s.top_k < 0) s.top_k = 0;
  s.repetition_penalty = static_cast<float>(get_number(body, "repetition_penalty", d.repetition_penalty, 0.0, 2.0));
  if (s.repetition_penalty <= 0.0f) throw bad_request("'repetition_penalty' must be greater than 0", "repetition_penalty");
  const Json* seed = field(body, "seed");
  if (seed) {
    if (!seed->is_number_integer()) throw bad_request("'seed' must be an integer", "seed");
    s.seed = seed->is_number_unsigned() ? seed->get<uint64_t>() : static_cast<uint64_t>(seed->get<int64_t>());
  }
  if (const Json* stop = field(body, "stop")) {
    if (stop->is_string()) {
      s.stop.push_back(stop->get<std::string>());
    } else if (stop->is_array() && stop->size() <= 4) {
      for (const Json& x : *stop) {
        if (!x.is_string()) throw bad_request("'stop' must be a string or an array of up to 4 strings", "stop");
        s.stop.push_back(x.get<std::string>());
      }
    } else {
      throw bad_request("'stop' must be a string or an array of up to 4 strings", "stop");
    }
    for (auto& x : s.stop)
      if (x.empty()) throw bad_request("'stop' strings must not be empty", "stop");
  }
  s.ignore_eos = get_bool(body, "ignore_eos", false);
  const Json* n = field(body, "n");
  if (n && (!n->is_number_integer() || n->get<int64_t>() != 1)) throw bad_request("only 'n': 1 is supported", "n");
  const Json* best_of = field(body, "best_of");
  if (best_of && (!best_of->is_number_integer() || best_of->get<int64_t>() != 1))
    throw bad_request("only 'best_of': 1 is supported", "best_of");

  constexpr int kTop = sdk::kMaxTopLogprobs;
  if (chat) {
    const bool lp = get_bool(body, "logprobs", false);
    const Json* top = field(body, "top_logprobs");
    if (top && !lp) throw bad_request("'top_logprobs' needs 'logprobs': true", "top_logprobs");
    if (lp) s.logprobs = static_cast<int>(get_int(body, "top_logprobs", 0, 0, kTop));
  } else if (field(body, "logprobs")) {
    s.logprobs = static_cast<int>(get_int(body, "logprobs", 0, 0, kTop));
  }
  if (const Json* bias = field(body, "logit_bias")) {
    if (!bias->is_object()) throw bad_request("'logit_bias' must be an object of token ids to numbers", "logit_bias");
    for (const auto& [key, value] : bias->items()) {
      const bool digits = !key.empty() && key.size() <= 9 && key.find_first_not_of("0123456789") == std::string::npos;
      if (!digits) throw bad_request("'logit_bias' key '" + key + "' is not a token id", "logit_bias");
      if (!value.is_number() || !std::isfinite(value.get<double>()) || value.get<double>() < -100.0 ||
          value.get<double>() > 100.0)
        throw bad_request("'logit_bias' value of token " + key + " must be a number in [-100, 100]", "logit_bias");
      s.logit_bias.emplace_back(std::stoi(key), static_cast<float>(value.get<double>()));
    }
  }
  s.min_tokens = static_cast<int>(get_int(body, "min_tokens", 0, 0, kMaxTokensLimit));
  if (s.min_tokens > s.max_tokens) throw bad_request("'min_tokens' must not exceed 'max_tokens'", "min_tokens");
  if (const Json* ids = field(body, "stop_token_ids")) {
    if (!ids->is_array()) throw bad_request("'stop_token_ids' must be an array of token ids", "stop_token_ids");
    for (const Json& x : *ids) {
      if (!x.is_number_integer() || x.get<int64_t>() < 0 || x.get<int64_t>() > (1 << 30))
        throw bad_request("'stop_token_ids' must be an array of token ids", "stop_token_ids");
      s.stop_token_ids.push_back(static_cast<int>(x.get<int64_t>()));
    }
  }
  s.presence_penalty = static_cast<float>(get_number(body, "presence_penalty", 0.0, -2.0, 2.0));
  s.frequency_penalty = static_cast<float>(get_number(body, "frequency_penalty", 0.0, -2.0, 2.0));
  // Asked for and not done would be a silent wrong answer: refused instead.
  if (const Json* rf = field(body, "response_format")) {
    if (!rf->is_object()) throw bad_request("'response_format' must be an object", "response_format");
    const std::string type = get_string(*rf, "type", "text");
    if (type != "text")
      throw bad_request("'response_format' of type '" + type + "' is not supported (only 'text')", "response_format");
  }
  return s;
}

void parse_stream(const Json& body, bool& stream, bool& include_usage) {
  stream = get_bool(body, "stream", false);
  if (const Json* so = field(body, "stream_options")) {
    if (!so->is_object()) throw bad_request("'stream_options' must be an object", "stream_options");
    include_usage = get_bool(*so, "include_usage", false);
  }
}

// A message's content: a string, null, or an array of text parts; returns the parts.
std::vector<ContentPart> content_parts(const Json& content, size_t index) {
  const std::string where = "messages[" + std::to_string(index) + "].content";
  std::vector<ContentPart> parts;
  if (content.is_null()) return parts;
  if (content.is_string()) {
    parts.push_back({content.get<std::string>(), false});
    return parts;
  }
  if (!content.is_array()) throw bad_request("'" + where + "' must be a string, null or an array of parts", where);
  for (size_t i = 0; i < content.size(); ++i) {
    const Json& p = content[i];
    const std::string pw = where + "[" + std::to_string(i) + "]";
    if (!p.is_object()) throw bad_request("'" + pw + "' must be an object", pw);
    const std::string type = get_string(p, "type");
    if (type != "text") throw bad_request("'" + pw + "': only parts of type 'text' are supported", pw);
    ContentPart part;
    const Json* text = field(p, "text");
    if (!text || !text->is_string()) throw bad_request("'" + pw + ".text' must be a string", pw);
    part.text = text->get<std::string>();
    if (const Json* c = field(p, "cache")) {
      if (!c->is_boolean()) throw bad_request("'" + pw + ".cache' must be true or false", pw);
      part.cache = c->get<bool>();
    }
    parts.push_back(std::move(part));
  }
  return parts;
}

}  // namespace

namespace {

// {"template": NAME, "vars": {...}}. A name is looked up among the loaded templates, never used as a
// path, so it is only checked to be a string here.
ChatRequest::TemplateRef parse_template_ref(const Json& h) {
  if (!h.is_object()) throw bad_request("'hypic' must be an object {\"template\": NAME, \"vars\": {...}}", "hypic");
  for (const auto& [k, v] : h.items())
    if (k != "template" && k != "vars")
      throw bad_request("'hypic' has unknown field '" + k + "' (known: template, vars)", "hypic." + k);
  ChatRequest::TemplateRef t;
  const Json* name = field(h, "template");
  if (!name || !name->is_string() || name->get<std::string>().empty())
    throw bad_request("'hypic.template' must be a template name", "hypic.template");
  t.name = name->get<std::string>();
  if (const Json* vars = field(h, "vars")) {
    if (!vars->is_object()) throw bad_request("'hypic.vars' must be an object", "hypic.vars");
    t.vars = *vars;
  }
  return t;
}

}  // namespace

ChatRequest parse_chat_request(const Json& body, const SamplingDefaults& defaults) {
  ChatRequest r;
  r.model = get_string(body, "model");
  if (const Json* h = field(body, "hypic")) r.template_ref = parse_template_ref(*h);
  const Json* messages = field(body, "messages");
  // With a template the messages only continue its prompt, so there may be none.
  if (!messages || !messages->is_array() || (messages->empty() && !r.template_ref))
    throw bad_request(r.template_ref ? "'messages' must be an array" : "'messages' must be a non-empty array", "messages");
  // Content parts are joined into one string per message for the chat format's parser.
  Json conv = {{"messages", Json::array()}};
  for (size_t i = 0; i < messages->size(); ++i) {
    const Json& m = (*messages)[i];
    if (!m.is_object()) throw bad_request("'messages[" + std::to_string(i) + "]' must be an object", "messages");
    Json copy = m;
    auto it = m.find("content");
    std::vector<ContentPart> parts = it == m.end() ? std::vector<ContentPart>{} : content_parts(*it, i);
    std::string joined;
    for (size_t k = 0; k < parts.size(); ++k) joined += (k ? "\n" : "") + parts[k].text;
    if (it != m.end() && !it->is_null()) copy["content"] = joined;
    conv["messages"].push_back(std::move(copy));
    r.parts.push_back(std::move(parts));
  }
  if (const Json* tools = field(body, "tools")) {
    if (!tools->is_array()) throw bad_request("'tools' must be an array", "tools");
    for (size_t i = 0; i < tools->size(); ++i) {
      const Json& t = (*tools)[i];
      const Json* fn = t.is_object() ? field(t, "function") : nullptr;
      if (!fn || !fn->is_object() || !field(*fn, "name") || !(*fn)["name"].is_string())
        throw bad_request("'tools[" + std::to_string(i) + "]' must be {\"type\": \"function\", \"function\": {\"name\": ...}}",
                          "tools");
    }
    if (r.template_ref)
      throw bad_request("a request naming a template takes its tools from the template; leave out 'tools'", "tools");
    conv["tools"] = *tools;
  }
  try {
    r.conversation = parse_openai_conversation(conv, "request");
  } catch (const Error& e) {
    throw bad_request(e.what(), "messages");
  }
  if (const Json* tc = field(body, "tool_choice")) {
    if (tc->is_string()) {
      const std::string s = tc->get<std::string>();
      if (s == "auto") r.tool_choice = ChatRequest::ToolChoice::Auto;
      else if (s == "none") r.tool_choice = ChatRequest::ToolChoice::None;
      else if (s == "required") r.tool_choice = ChatRequest::ToolChoice::Required;
      else throw bad_request("'tool_choice' must be auto, none, required or a named function", "tool_choice");
    } else if (tc->is_object() && field(*tc, "function") && (*tc)["function"].is_object()) {
      r.tool_choice = ChatRequest::ToolChoice::Named;
      r.tool_name = get_string((*tc)["function"], "name");
      // A template's tools are checked when it is rendered (prepare_template_chat).
      if (!r.template_ref && !find_tool(r.conversation.tools, r.tool_name))
        throw bad_request("'tool_choice' names '" + r.tool_name + "', which is not in 'tools'", "tool_choice");
    } else {
      throw bad_request("'tool_choice' must be auto, none, required or a named function", "tool_choice");
    }
    if (r.tool_choice == ChatRequest::ToolChoice::Required && r.conversation.tools.empty() && !r.template_ref)
      throw bad_request("'tool_choice' is required but no 'tools' were given", "tool_choice");
  }
  parse_stream(body, r.stream, r.include_usage);
  r.sampling = parse_sampling(body, 256, true, defaults);
  r.cache_salt = get_string(body, "cache_salt");
  if (const Json* kw = field(body, "chat_template_kwargs")) {
    if (!kw->is_object()) throw bad_request("'chat_template_kwargs' must be an object", "chat_template_kwargs");
    if (field(*kw, "enable_thinking")) r.enable_thinking = get_bool(*kw, "enable_thinking", false);
  }
  return r;
}

CompletionRequest parse_completion_request(const Json& body, const SamplingDefaults& defaults) {
  CompletionRequest r;
  r.model = get_string(body, "model");
  const Json* prompt = field(body, "prompt");
  if (prompt && prompt->is_array() && prompt->size() == 1 && (*prompt)[0].is_string()) prompt = &(*prompt)[0];
  if (!prompt || !prompt->is_string() || prompt->get<std::string>().empty())
    throw bad_request("'prompt' must be a non-empty string (or an array of one)", "prompt");
  r.prompt = prompt->get<std::string>();
  parse_stream(body, r.stream, r.include_usage);
  r.sampling = parse_sampling(body, 16, false, defaults);
  if (get_bool(body, "echo", false)) throw bad_request("'echo' is not supported", "echo");
  if (!get_string(body, "suffix").empty()) throw bad_request("'suffix' is not supported", "suffix");
  r.cache_salt = get_string(body, "cache_salt");
  return r;
}

SamplingDefaults sampling_defaults(const Json& gc, const std::string& where) {
  SamplingDefaults d;
  if (!gc.is_object()) throw Error(where + ": not a JSON object");
  // A field is taken when it is a number in range; null counts as absent (transformers writes some so).
  auto number = [&](const char* name, double lo, double hi, bool lo_open) -> std::optional<double> {
    auto it = gc.find(name);
    if (it == gc.end() || it->is_null()) return std::nullopt;
    if (!it->is_number()) throw Error(where + ": '" + name + "' must be a number");
    const double v = it->get<double>();
    if (!std::isfinite(v) || v > hi || (lo_open ? v <= lo : v < lo))
      throw Error(where + ": '" + name + "' is out of range (" + (lo_open ? "(" : "[") + std::to_string(lo) + ", " +
                  std::to_string(hi) + "])");
    d.from_file.push_back(name);
    return v;
  };
  if (auto v = number("temperature", 0.0, 2.0, false)) d.temperature = static_cast<float>(*v);
  if (auto v = number("top_p", 0.0, 1.0, true)) d.top_p = static_cast<float>(*v);
  if (auto v = number("top_k", -1.0, 1 << 30, false)) {
    if (*v != std::floor(*v)) throw Error(where + ": 'top_k' must be an integer");
    d.top_k = *v < 0 ? 0 : static_cast<int>(*v);
  }
  if (auto v = number("repetition_penalty", 0.0, 2.0, true)) d.repetition_penalty = static_cast<float>(*v);
  if (auto v = number("max_new_tokens", 1.0, static_cast<double>(kMaxTokensLimit), false)) {
    if (*v != std::floor(*v)) throw Error(where + ": 'max_new_tokens' must be an integer");
    d.max_tokens = static_cast<int>(*v);
  }
  return d;
}

void check_token_ids(const Sampling& s, int64_t vocab) {
  auto beyond = [&](int id, const char* name) {
    return bad_request(std::string("'") + name + "' names token " + std::to_string(id) + "; the model's ids are below " +
                           std::to_string(vocab),
                       name);
  };
  for (const auto& [id, bias] : s.logit_bias)
    if (id >= vocab) throw beyond(id, "logit_bias");
  for (int id : s.stop_token_ids)
    if (id >= vocab) throw beyond(id, "stop_token_ids");
}

Json usage_json(const PromptReport& p, int64_t completion_tokens) {
  Json blocks = Json::array();
  for (auto& b : p.blocks) {
    Json j = {{"kind", b.kind}};
    if (!b.id.empty()) j["id"] = b.id;
    j["tokens"] = b.tokens;
    j["hit"] = b.hit;
    blocks.push_back(std::move(j));
  }
  const int64_t cached = std::max<int64_t>(0, p.prompt_tokens - p.computed_tokens);
  return Json{{"prompt_tokens", p.prompt_tokens},
              {"completion_tokens", completion_tokens},
              {"total_tokens", p.prompt_tokens + completion_tokens},
              {"prompt_tokens_details", {{"cached_tokens", cached}}},
              {"hypic",
               {{"computed_tokens", p.computed_tokens},
                {"reused_tokens", p.reused_tokens},
                {"ttft_ms", p.ttft_ms},
                {"queue_ms", p.queue_ms},
                {"blocks", blocks}}}};
}

namespace {

Json bytes_json(const std::string& t) {
  Json b = Json::array();
  for (unsigned char c : t) b.push_back(static_cast<int>(c));
  return b;
}

Json tool_calls_json(const std::vector<ToolCallOut>& calls) {
  Json a = Json::array();
  for (auto& c : calls)
    a.push_back({{"id", c.id}, {"type", "function"}, {"function", {{"name", c.name}, {"arguments", c.arguments}}}});
  return a;
}

}  // namespace

Json chat_logprobs_json(const std::vector<LogprobEntry>& entries) {
  Json content = Json::array();
  for (const LogprobEntry& e : entries) {
    Json top = Json::array();
    for (const auto& [tok, lp] : e.top) top.push_back({{"token", tok}, {"logprob", lp}, {"bytes", bytes_json(tok)}});
    content.push_back({{"token", e.token}, {"logprob", e.logprob}, {"bytes", bytes_json(e.token)}, {"top_logprobs", top}});
  }
  return Json{{"content", content}};
}

Json completion_logprobs_json(const std::vector<LogprobEntry>& entries, size_t offset0) {
  Json tokens = Json::array(), lps = Json::array(), tops = Json::array(), offsets = Json::array();
  size_t at = offset0;
  for (const LogprobEntry& e : entries) {
    tokens.push_back(e.token);
    lps.push_back(e.logprob);
    Json top = Json::object();
    for (const auto& [tok, lp] : e.top)
      if (!top.contains(tok)) top[tok] = lp;  // two ids may decode alike; the likelier one is kept
    tops.push_back(top);
    offsets.push_back(at);
    at += e.token.size();
  }
  return Json{{"tokens", tokens}, {"token_logprobs", lps}, {"top_logprobs", tops}, {"text_offset", offsets}};
}

Json chat_completion_json(const std::string& id, int64_t created, const std::string& model, const ChatReply& reply,
                          const Json& usage, const Json& logprobs) {
  Json msg = {{"role", "assistant"}};
  msg["content"] = reply.content.empty() && !reply.tool_calls.empty() ? Json(nullptr) : Json(reply.content);
  if (!reply.reasoning.empty()) msg["reasoning_content"] = reply.reasoning;
  if (!reply.tool_calls.empty()) msg["tool_calls"] = tool_calls_json(reply.tool_calls);
  return Json{{"id", id},
              {"object", "chat.completion"},
              {"created", created},
              {"model", model},
              {"choices", Json::array({{{"index", 0}, {"message", msg}, {"logprobs", logprobs},
                                        {"finish_reason", reply.finish_reason}}})},
              {"usage", usage}};
}

Json chat_chunk_json(const std::string& id, int64_t created, const std::string& model, const Json& delta,
                     const std::string& finish_reason, const Json& logprobs) {
  Json choice = {{"index", 0}, {"delta", delta}, {"logprobs", logprobs}};
  choice["finish_reason"] = finish_reason.empty() ? Json(nullptr) : Json(finish_reason);
  return Json{{"id", id},
              {"object", "chat.completion.chunk"},
              {"created", created},
              {"model", model},
              {"choices", Json::array({choice})}};
}

Json usage_chunk_json(const std::string& id, int64_t created, const std::string& model, const char* object,
                      const Json& usage) {
  return Json{{"id", id}, {"object", object}, {"created", created}, {"model", model},
              {"choices", Json::array()}, {"usage", usage}};
}

Json completion_json(const std::string& id, int64_t created, const std::string& model, const std::string& text,
                     const std::string& finish_reason, const Json& usage, const Json& logprobs) {
  return Json{{"id", id},
              {"object", "text_completion"},
              {"created", created},
              {"model", model},
              {"choices", Json::array({{{"index", 0}, {"text", text}, {"logprobs", logprobs},
                                        {"finish_reason", finish_reason}}})},
              {"usage", usage}};
}

Json completion_chunk_json(const std::string& id, int64_t created, const std::string& model, const std::string& text,
                           const std::string& finish_reason, const Json& logprobs) {
  Json choice = {{"index", 0}, {"text", text}, {"logprobs", logprobs}};
  choice["finish_reason"] = finish_reason.empty() ? Json(nullptr) : Json(finish_reason);
  return Json{{"id", id}, {"object", "text_completion"}, {"created", created}, {"model", model},
              {"choices", Json::array({choice})}};
}

Json models_json(const std::string& model, int64_t created) {
  return Json{{"object", "list"},
              {"data", Json::array({{{"id", model}, {"object", "model"}, {"created", created}, {"owned_by", "hypic"}}})}};
}

std::string sse_event(const Json& j) {
  // Invalid UTF-8 from a model (a truncated character) is replaced rather than thrown on.
  return "data: " + j.dump(-1, ' ', false, Json::error_handler_t::replace) + "\n\n";
}

std::string finish_reason(const std::string& engine_finish, bool tool_calls) {
  if (tool_calls) return "tool_calls";
  if (engine_finish == "length") return "length";
  return "stop";  // stop, or cancelled (no client is left to read it)
}

}  // namespace hypic::serve
