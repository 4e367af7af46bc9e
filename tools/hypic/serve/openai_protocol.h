// The OpenAI wire protocol of `hypic serve`, as pure functions: requests parsed from JSON into typed
// structs (every mistake an ApiError naming the field, with OpenAI's status code) and responses, stream
// chunks, usage and errors built as JSON. No I/O and no model here, so all of it is unit-tested and fuzzed.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/error.h"
#include "runtime/text/chat_format.h"

namespace hypic::serve {

using Json = nlohmann::ordered_json;

// An error answered with OpenAI's error object ({"error": {"message", "type", "param", "code"}}).
class ApiError : public Error {
 public:
  ApiError(int status, std::string type, std::string message, std::string param = {})
      : Error(message), status(status), type(std::move(type)), param(std::move(param)) {}
  int status;        // 400, 401, 404, 413, 429, 500, 503
  std::string type;  // invalid_request_error, authentication_error, not_found_error, ...
  std::string param;  // the request field at fault, when one is
};

ApiError bad_request(const std::string& message, const std::string& param = {});
Json error_body(const ApiError& e);

// One text part of a message. `cache` (hypic's extension: {"type": "text", "text": ..., "cache": true})
// marks a retrieved document: it becomes a prompt block of its own, reused wherever it appears.
struct ContentPart {
  std::string text;
  bool cache = false;
};

struct Sampling {
  int max_tokens = 256;
  float temperature = 1.0f;  // OpenAI's default; 0 is greedy
  float top_p = 1.0f;
  int top_k = 0;  // vLLM's extension; 0 or -1: off
  uint64_t seed = 0;
  std::vector<std::string> stop;
  bool ignore_eos = false;  // vLLM's extension: end-of-turn tokens do not stop the reply
  // Each sampled token's logprob and this many alternatives' (-1: none). Chat: logprobs + top_logprobs;
  // completions: the integer logprobs.
  int logprobs = -1;
  std::vector<std::pair<int, float>> logit_bias;  // token id -> bias in [-100, 100]
  float presence_penalty = 0.0f, frequency_penalty = 0.0f;  // [-2, 2]
  float repetition_penalty = 1.0f;  // vLLM's extension, (0, 2]; 1 is off
  int min_tokens = 0;                // vLLM's: no end of the reply before this many tokens
  std::vector<int> stop_token_ids;   // vLLM's: more ids that end the reply
};

// What a request's omitted sampling fields take: OpenAI's defaults, or (`hypic serve --generation-config
// auto`, as vLLM does) those the model's generation_config.json sets: temperature, top_p, top_k,
// repetition_penalty and max_new_tokens (the default max_tokens).
struct SamplingDefaults {
  float temperature = 1.0f;
  float top_p = 1.0f;
  int top_k = 0;
  float repetition_penalty = 1.0f;
  int max_tokens = 0;  // 0: the endpoint's own (256 for chat, 16 for completions)
  std::vector<std::string> from_file;  // the fields a generation_config.json set, for the start-up line
};

// Reads a generation_config.json's sampling fields; Error naming `where` and the field when one is
// ill-typed or out of range. Fields it does not know are left alone.
SamplingDefaults sampling_defaults(const Json& generation_config, const std::string& where);

// 400 naming logit_bias or stop_token_ids when one of its ids is not below the model's vocabulary size.
void check_token_ids(const Sampling& s, int64_t vocab);

struct ChatRequest {
  std::string model;
  Conversation conversation;  // a message's content is its parts joined by "\n"
  std::vector<std::vector<ContentPart>> parts;  // per message
  enum class ToolChoice { Auto, None, Required, Named } tool_choice = ToolChoice::Auto;
  std::string tool_name;  // ToolChoice::Named
  bool stream = false, include_usage = false;
  Sampling sampling;
  std::string cache_salt;  // OpenAI's per-request cache isolation key (joins the API key's namespace)
  std::optional<bool> enable_thinking;  // chat_template_kwargs.enable_thinking
  // hypic's extension {"hypic": {"template": NAME, "vars": {...}}}: the prompt starts with a server-side
  // YAML template (`hypic serve --templates DIR`) rendered with `vars`; `messages` (then possibly empty)
  // follow it, and the template's tools are the request's tools.
  struct TemplateRef {
    std::string name;
    Json vars = Json::object();
  };
  std::optional<TemplateRef> template_ref;
};

struct CompletionRequest {
  std::string model;
  std::string prompt;
  bool stream = false, include_usage = false;
  Sampling sampling;
  std::string cache_salt;
};

// Both throw ApiError (400 naming the field) for anything malformed; `max_context` bounds max_tokens.
ChatRequest parse_chat_request(const Json& body, const SamplingDefaults& defaults = {});
CompletionRequest parse_completion_request(const Json& body, const SamplingDefaults& defaults = {});
// Parses a request body; a body that is not a JSON object is a 400.
Json parse_body(const std::string& text);

// What the engine reported about the prompt of one request.
struct PromptReport {
  int64_t prompt_tokens = 0, computed_tokens = 0, reused_tokens = 0;
  double ttft_ms = 0, queue_ms = 0;
  struct Block {
    std::string kind;  // system | tools | message | document | template | prompt
    int64_t tokens = 0;
    bool hit = false;
    std::string id;  // a template block's id (empty for others)
  };
  std::vector<Block> blocks;
};

// usage: prompt/completion/total tokens, prompt_tokens_details.cached_tokens (prompt tokens not
// computed) and hypic's own field (computed and reused tokens, per-block hits, TTFT).
Json usage_json(const PromptReport& p, int64_t completion_tokens);

struct ToolCallOut {
  std::string id, name;
  std::string arguments;  // JSON text, as OpenAI sends it
};

// One sampled token's logprob for the wire: its text (the token's bytes; invalid UTF-8 is replaced when
// the JSON is written, and `bytes` carries them exactly) and its most likely alternatives.
struct LogprobEntry {
  std::string token;
  float logprob = 0.0f;
  std::vector<std::pair<std::string, float>> top;
};

// Chat's {"content": [{"token", "logprob", "bytes", "top_logprobs": [...]}, ...]}.
Json chat_logprobs_json(const std::vector<LogprobEntry>& entries);
// The completions API's {"tokens", "token_logprobs", "top_logprobs": [{token: logprob}], "text_offset"}, the
// offsets counted from `offset0` (the bytes of text before these tokens).
Json completion_logprobs_json(const std::vector<LogprobEntry>& entries, size_t offset0);

struct ChatReply {
  std::string content, reasoning;
  std::vector<ToolCallOut> tool_calls;
  std::string finish_reason;  // stop | length | tool_calls
};

// `logprobs`: the choice's logprobs object, or null.
Json chat_completion_json(const std::string& id, int64_t created, const std::string& model, const ChatReply& reply,
                          const Json& usage, const Json& logprobs = nullptr);
// One streamed chunk: `delta` as given (role, content, reasoning_content or tool_calls), finish_reason
// null unless given.
Json chat_chunk_json(const std::string& id, int64_t created, const std::string& model, const Json& delta,
                     const std::string& finish_reason = {}, const Json& logprobs = nullptr);
// The last chunk when stream_options.include_usage: no choices, the usage.
Json usage_chunk_json(const std::string& id, int64_t created, const std::string& model, const char* object,
                      const Json& usage);
Json completion_json(const std::string& id, int64_t created, const std::string& model, const std::string& text,
                     const std::string& finish_reason, const Json& usage, const Json& logprobs = nullptr);
Json completion_chunk_json(const std::string& id, int64_t created, const std::string& model, const std::string& text,
                           const std::string& finish_reason = {}, const Json& logprobs = nullptr);
Json models_json(const std::string& model, int64_t created);
// "data: <json>\n\n"
std::string sse_event(const Json& j);

// OpenAI's finish_reason for an engine finish (stop, length, cancelled) and whether tool calls were made.
std::string finish_reason(const std::string& engine_finish, bool tool_calls);

}  // namespace hypic::serve
