// hypic::sdk::Session — one conversation on the model. The first step runs its prompt blocks through
// the caching engine; every later step runs only the new text, continuing the exact state.
#pragma once
#include <atomic>
#include <functional>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/sampling.h"
#include "sdk/runtime.h"

namespace hypic::sdk {

struct GenerateOptions {
  int max_tokens = 256;
  cpu::SamplingParams sampling;  // greedy unless temperature > 0
  uint64_t seed = 0;
  std::vector<std::string> stop;  // stop strings, besides the model's end-of-turn tokens
  std::function<void(std::string_view)> on_text;  // streamed text, never half a UTF-8 character
  const std::atomic<bool>* cancel = nullptr;       // set from any thread to stop after the current token
};

struct Generation {
  enum class Finish { Stop, Length, Cancelled };
  std::string text;         // without the end-of-turn token or the matched stop string
  std::vector<int> tokens;  // every sampled token, the end-of-turn token included
  Finish finish = Finish::Length;
};

const char* finish_name(Generation::Finish f);

class Session {
 public:
  explicit Session(Runtime& rt);

  // Starts (or restarts) the conversation from prompt blocks through the engine; the last block is
  // the query tail. Per-block hits and the computed token count are in the result.
  PromptResult prefill(const std::vector<PromptBlock>& blocks);
  // Continues exactly: runs only these tokens (after any token sampled but not yet run).
  void append_tokens(std::span<const int> ids);
  void append_text(const std::string& text);

  Generation generate(const GenerateOptions& opt);

  int64_t length() const { return state_.length + static_cast<int64_t>(pending_.size()); }
  Runtime& runtime() { return rt_; }

 private:
  Runtime& rt_;
  SequenceState state_;
  std::vector<float> logits_;  // next-token logits; valid when pending_ is empty and started_
  std::vector<int> pending_;   // sampled, not yet run (the end-of-turn token of the last reply)
  bool started_ = false;
  std::mt19937_64 rng_;
};

}  // namespace hypic::sdk
