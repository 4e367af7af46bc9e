// hypic::sdk::Session — one conversation on the model, on the runtime's device. prefill() runs prompt
// blocks through the caching engine; append_* and generate() continue the exact state. A later prefill()
// whose prompt extends what the session has run continues the live state exactly (only the new tokens
// are computed); so does one that extends the prompt of the last prefill (the checkpoint taken before
// generating), which covers chat templates that re-render the last reply differently from how it was
// generated (the chat format's HistoryRule: Qwen3/3.5 drop the reasoning of earlier turns).
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kernels/sampling.h"
#include "runtime/text/streaming_decoder.h"
#include "sdk/runtime.h"

namespace hypic::sdk {

// A sampled token's log-probability under the model (the log-softmax of its raw logits, before the logit
// bias, penalties and temperature: what vLLM reports by default), with the most likely tokens' when asked.
struct TokenLogprob {
  int id = -1;
  float logprob = 0.0f;
  std::vector<std::pair<int, float>> top;  // (id, logprob), most likely first (ties: lower id first)
};

constexpr int kMaxTopLogprobs = 20;

struct GenerateOptions {
  int max_tokens = 256;
  SamplingParams sampling;  // greedy unless temperature > 0
  uint64_t seed = 0;
  // Token-level controls (OpenAI's): each sampled token's logprob and its `logprobs` most likely
  // alternatives (-1: none; 0: the token's own only; at most kMaxTopLogprobs); a bias added to the logits
  // of some ids; presence and frequency penalties over the tokens this generation has sampled,
  // logit[j] -= frequency_penalty * count_j + presence_penalty * (count_j > 0). Any of them draws the
  // generation's tokens on the host from its logits row (no device draw in a batched step).
  // repetition_penalty (transformers' and vLLM's, > 0; 1 is off) divides a positive logit and multiplies a
  // negative one of every id in the conversation so far, prompt and reply.
  int logprobs = -1;
  std::vector<std::pair<int, float>> logit_bias;
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  float repetition_penalty = 1.0f;
  // Called with every sampled token's logprob (when `logprobs` >= 0) before its text is streamed; the
  // end-of-turn token and a token that completes a stop string get none (their text is not in the reply).
  std::function<void(const TokenLogprob&)> on_logprob;
  std::vector<std::string> stop;  // stop strings, besides the model's end-of-turn tokens
  std::vector<int> stop_token_ids;  // more ids that end the reply like an end-of-turn token (even with ignore_eos)
  // No end-of-turn token nor stop_token_ids id before this many tokens (their logits are taken out until
  // then; vLLM's min_tokens). Draws on the host, as the token controls do.
  int min_tokens = 0;
  std::function<void(std::string_view)> on_text;  // streamed text, never half a UTF-8 character
  const std::atomic<bool>* cancel = nullptr;       // set from any thread to stop after the current token
  bool ignore_eos = false;  // end-of-turn tokens do not stop generation (benchmarks: fixed reply lengths)
};

struct Generation {
  enum class Finish { Stop, Length, Cancelled };
  std::string text;         // without the end-of-turn token or the matched stop string
  std::vector<int> tokens;  // every sampled token, the end-of-turn token included
  Finish finish = Finish::Length;
  std::vector<TokenLogprob> logprobs;  // with GenerateOptions::logprobs >= 0: one per token of `text`
};

const char* finish_name(Generation::Finish f);

class GenerationSteps;

class Session {
 public:
  explicit Session(Runtime& rt);

  // Starts or continues the conversation from prompt blocks through the engine; the last block is the
  // query tail. `after_checkpoint`: the end of the generation prompt that a re-rendered reply does not
  // start with (Qwen3.5's opened reasoning section); the checkpoint is taken before it, then it is run. Per-block
  // hits, reused and computed token counts and the TTFT are in the result (its state is kept by the
  // session).
  PromptResult prefill(const std::vector<PromptBlock>& blocks, std::span<const int> after_checkpoint = {});
  // prefill() in steps, for a server that decodes other sessions between them: begin_prefill() checks
  // the prompt (InvalidArgument leaves the session as it was) and hands the session's live state to the
  // job; run job->step(budget) until it returns false, then end_prefill() takes the result as prefill()
  // does. Until then the session has no prompt: dropping the job (a cancelled request) leaves it empty.
  std::unique_ptr<PromptJob> begin_prefill(const std::vector<PromptBlock>& blocks);
  PromptResult end_prefill(PromptJob& job, std::span<const int> after_checkpoint = {});
  // Keep a copy of the state at the end of every prompt: costs one state copy per prompt. On by
  // default when the runtime's chat format re-renders earlier replies (HistoryRule).
  void set_prompt_checkpoint(bool on) { checkpoint_on_ = on; }
  // Continues exactly: runs only these tokens (after any token sampled but not yet run).
  void append_tokens(std::span<const int> ids);
  void append_text(const std::string& text);

  Generation generate(const GenerateOptions& opt);
  // Runs the token each session's generation just sampled (GenerationSteps::step), all in one batched
  // decode pass; the sessions must share one runtime and be distinct.
  // With several sessions, each generation's next token is drawn in the same pass where the logits are
  // (on the device for the CUDA backend), from the uniform draw its GenerationSteps already took, so the
  // [N, V] logits never come back to the host; the last step of a generation gets its logits as usual.
  static void run_sampled(std::span<Session* const> sessions);

  // Segment keys of this session's prompts live in this namespace (a tenant; see Engine::run).
  void set_key_namespace(std::string ns) { key_namespace_ = std::move(ns); }

  int64_t length() const { return state_->length + static_cast<int64_t>(pending_.size()); }
  // Every token run so far, in order (sampled tokens not yet run are not included).
  const std::vector<int>& transcript() const { return transcript_; }
  Runtime& runtime() { return rt_; }

 private:
  friend class GenerationSteps;
  Runtime& rt_;
  std::unique_ptr<State> state_;
  std::vector<int> transcript_;
  LiveSequence checkpoint_;  // the state and tokens at the end of the last prefill
  bool checkpoint_on_ = true;
  std::vector<float> logits_;  // next-token logits; valid when pending_ is empty and started_
  std::vector<int> pending_;   // sampled, not yet run (the end-of-turn token of the last reply)
  bool started_ = false;
  std::mt19937_64 rng_;
  std::string key_namespace_;
  int sampled_ = -1;  // the token the current GenerationSteps sampled and wants run, or -1
  // How the generation will draw its next token (its uniform draw already taken), set with sampled_: a
  // batched run may then draw it where the logits are (Engine::decode_batch_drawn) instead of returning
  // them. presampled_: the token so drawn, or -1; logits_valid_ is false while logits_ were not kept.
  std::optional<Engine::TokenDraw> next_draw_;
  int presampled_ = -1;
  bool logits_valid_ = true;
};

// One generation as single steps, for a server that interleaves the decoding of many sessions: step()
// samples the next token from the session's logits and applies the stop rules and streaming of
// Session::generate (which is this loop with one session); the caller then runs the sampled token with
// Session::run_sampled, alone or batched with other sessions' tokens.
class GenerationSteps {
 public:
  GenerationSteps(Session& s, GenerateOptions opt);
  // true: a token was sampled and must be run before the next step; false: the generation ended (the
  // result is final).
  bool step();
  const Generation& result() const { return g_; }
  Session& session() { return s_; }

 private:
  void flush(bool all);
  void end(Generation::Finish f);
  // Whether the rule for the reply's k-th token (from 1) needs the logits row on the host (logprobs, bias,
  // penalties, min_tokens).
  bool host_rule(int k) const;
  // Whether the presence or frequency penalty is on (the reply's tokens are then counted).
  bool counted() const { return opt_.presence_penalty != 0.0f || opt_.frequency_penalty != 0.0f; }
  int draw_on_host(const std::vector<float>& logits, int64_t n, double u, TokenLogprob* lp);

  Session& s_;
  GenerateOptions opt_;
  StreamingDecoder dec_;
  std::uniform_real_distribution<double> uniform_{0.0, 1.0};
  Generation g_;
  size_t streamed_ = 0;  // bytes of g_.text already given to on_text
  std::vector<float> work_;       // the logits row under bias and penalties
  std::vector<int> counts_;       // sampled tokens by id, for the penalties
  std::vector<int> used_ids_;     // the ids with a count, in first-use order
  std::vector<uint8_t> seen_;     // ids in the conversation and the reply, for repetition_penalty
  std::vector<int> seen_ids_;     // the same ids as a list
  int count_ = 0;
  bool done_ = false;
};

}  // namespace hypic::sdk
