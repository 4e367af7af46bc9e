#include "sdk/session.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <string>

#include "runtime/error.h"
#include "runtime/text/streaming_decoder.h"

namespace hypic::sdk {

const char* finish_name(Generation::Finish f) {
  switch (f) {
    case Generation::Finish::Stop: return "stop";
    case Generation::Finish::Length: return "length";
    case Generation::Finish::Cancelled: return "cancelled";
  }
  return "?";
}

Session::Session(Runtime& rt)
    : rt_(rt),
      state_(rt.backend().new_state()),
      checkpoint_on_(rt.chat_format().history_rule().drops_reasoning_before_last_query) {}

namespace {

bool extends(const std::vector<int>& tokens, const std::vector<int>& prompt) {
  return !tokens.empty() && tokens.size() < prompt.size() && std::equal(tokens.begin(), tokens.end(), prompt.begin());
}

}  // namespace

PromptResult Session::prefill(const std::vector<PromptBlock>& blocks, std::span<const int> after_checkpoint) {
  std::unique_ptr<PromptJob> job = begin_prefill(blocks);
  while (job->step(std::numeric_limits<int64_t>::max())) {
  }
  return end_prefill(*job, after_checkpoint);
}

std::unique_ptr<PromptJob> Session::begin_prefill(const std::vector<PromptBlock>& blocks) {
  check_prompt(blocks);
  const std::vector<int> prompt = prompt_tokens(blocks);
  // The longest exact prefix this session holds: everything it ran, or the prompt of its last prefill.
  LiveSequence live;
  if (started_ && extends(transcript_, prompt)) {
    live.state = std::move(state_);
    live.tokens = std::move(transcript_);
  } else if (extends(checkpoint_.tokens, prompt)) {
    live = std::move(checkpoint_);
  }
  std::unique_ptr<PromptJob> job;
  try {
    job = rt_.engine().begin(blocks, live.state ? &live : nullptr, key_namespace_);
  } catch (...) {
    // A refused prompt (checked before any state is touched) leaves the conversation as it was.
    if (live.state && !state_) {
      state_ = std::move(live.state);
      transcript_ = std::move(live.tokens);
    } else if (live.state) {
      checkpoint_ = std::move(live);
    }
    throw;
  }
  // The conversation now lives in the job: until end_prefill the session is an empty one.
  if (!state_) state_ = rt_.backend().new_state();
  else if (started_) rt_.backend().reset(*state_);
  transcript_.clear();
  checkpoint_ = LiveSequence();
  logits_.clear();
  logits_valid_ = false;
  pending_.clear();
  sampled_ = -1;
  presampled_ = -1;
  next_draw_.reset();
  started_ = false;
  return job;
}

PromptResult Session::end_prefill(PromptJob& job, std::span<const int> after_checkpoint) {
  PromptResult r = job.finish();
  state_ = std::move(r.state);
  transcript_ = job.prompt();
  checkpoint_ = LiveSequence();
  if (checkpoint_on_) checkpoint_ = {rt_.backend().clone(*state_), transcript_};
  logits_ = r.logits;
  logits_valid_ = true;
  pending_.clear();
  sampled_ = -1;
  presampled_ = -1;
  next_draw_.reset();
  started_ = true;
  if (!after_checkpoint.empty()) {
    // Part of the prompt: counted in its tokens and its time to first token.
    const auto t0 = std::chrono::steady_clock::now();
    append_tokens(after_checkpoint);
    r.logits = logits_;
    r.prompt_tokens += static_cast<int64_t>(after_checkpoint.size());
    r.computed_tokens += static_cast<int64_t>(after_checkpoint.size());
    r.ttft_ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  }
  return r;
}

void Session::append_tokens(std::span<const int> ids) {
  std::vector<int> run = pending_;
  run.insert(run.end(), ids.begin(), ids.end());
  if (run.empty()) return;
  logits_ = rt_.engine().forward(run, *state_);
  logits_valid_ = true;
  presampled_ = -1;
  next_draw_.reset();
  transcript_.insert(transcript_.end(), run.begin(), run.end());
  pending_.clear();
  started_ = true;
}

void Session::append_text(const std::string& text) {
  const std::vector<int> ids = rt_.tokenizer().encode(text);
  append_tokens(ids);
}

Generation Session::generate(const GenerateOptions& opt) {
  GenerationSteps steps(*this, opt);
  while (steps.step()) {
    Session* self = this;
    run_sampled(std::span<Session* const>(&self, 1));
  }
  return steps.result();
}

void Session::run_sampled(std::span<Session* const> sessions) {
  if (sessions.empty()) return;
  for (Session* s : sessions)
    if (s->sampled_ < 0) throw InvalidArgument("run_sampled: a session has no sampled token to run");
  Engine& engine = sessions[0]->rt_.engine();
  if (sessions.size() == 1) {
    Session& s = *sessions[0];
    const int one[1] = {s.sampled_};
    s.logits_ = engine.forward(one, *s.state_);
    s.logits_valid_ = true;
  } else {
    std::vector<State*> states;
    std::vector<int> ids;
    std::vector<const Engine::TokenDraw*> draws;
    for (Session* s : sessions) {
      if (&s->rt_.engine() != &engine) throw InvalidArgument("run_sampled: sessions of different runtimes");
      states.push_back(s->state_.get());
      ids.push_back(s->sampled_);
      draws.push_back(s->next_draw_ ? &*s->next_draw_ : nullptr);
    }
    std::vector<int> sampled(sessions.size(), -1);
    std::vector<std::vector<float>> logits;
    engine.decode_batch_drawn(states, ids, draws, sampled, logits);
    for (size_t i = 0; i < sessions.size(); ++i) {
      Session& s = *sessions[i];
      if (draws[i]) {
        s.presampled_ = sampled[i];
        s.logits_.clear();
        s.logits_valid_ = false;
      } else {
        s.logits_ = std::move(logits[i]);
        s.logits_valid_ = true;
      }
    }
  }
  for (Session* s : sessions) {
    s->transcript_.push_back(s->sampled_);
    s->sampled_ = -1;
  }
}

GenerationSteps::GenerationSteps(Session& s, GenerateOptions opt)
    : s_(s), opt_(std::move(opt)), dec_(s.rt_.tokenizer()) {
  if (!s_.started_) throw InvalidArgument("generate: the session has no prompt yet");
  if (!s_.pending_.empty()) s_.append_tokens({});
  if (!s_.logits_valid_)
    throw InvalidArgument("generate: the session's next-token logits were not kept (its last generation stopped "
                          "after a batched step had drawn the next token on the device); append text first");
  s_.sampled_ = -1;
  s_.presampled_ = -1;
  s_.next_draw_.reset();
  s_.rng_.seed(opt_.seed);
  if (opt_.logprobs > kMaxTopLogprobs)
    throw InvalidArgument("generate: at most " + std::to_string(kMaxTopLogprobs) + " top logprobs a token");
  const int64_t V = s_.rt_.config().vocab_size;
  for (const auto& [id, bias] : opt_.logit_bias)
    if (id < 0 || id >= V || !std::isfinite(bias))
      throw InvalidArgument("generate: a logit bias needs a token id in [0, " + std::to_string(V) + ") and a finite value");
  if (!std::isfinite(opt_.presence_penalty) || !std::isfinite(opt_.frequency_penalty))
    throw InvalidArgument("generate: penalties must be finite");
  if (!(opt_.repetition_penalty > 0.0f) || !std::isfinite(opt_.repetition_penalty))
    throw InvalidArgument("generate: repetition_penalty must be a positive number");
  if (opt_.min_tokens < 0) throw InvalidArgument("generate: min_tokens must not be negative");
  for (int id : opt_.stop_token_ids)
    if (id < 0 || id >= V) throw InvalidArgument("generate: a stop token id must be in [0, " + std::to_string(V) + ")");
  if (opt_.repetition_penalty != 1.0f) {
    seen_.assign(static_cast<size_t>(V), 0);
    for (const std::vector<int>* ids : {&s_.transcript_, &s_.pending_})
      for (int id : *ids)
        if (id >= 0 && id < V && !seen_[id]) {
          seen_[id] = 1;
          seen_ids_.push_back(id);
        }
  }
}

bool GenerationSteps::host_rule(int k) const {
  return opt_.logprobs >= 0 || !opt_.logit_bias.empty() || counted() || opt_.repetition_penalty != 1.0f ||
         k <= opt_.min_tokens;
}

int GenerationSteps::draw_on_host(const std::vector<float>& logits, int64_t n, double u, TokenLogprob* lp) {
  const float* row = logits.data();
  const bool penalised = counted();
  const float rep = opt_.repetition_penalty;
  const bool too_early = count_ <= opt_.min_tokens;  // count_ already counts the token being drawn
  if (!opt_.logit_bias.empty() || penalised || rep != 1.0f || too_early) {
    // Only the ids the rules name change: a vocabulary-sized pass per token would cost more than the rest.
    work_.assign(logits.begin(), logits.begin() + n);
    if (rep != 1.0f)  // first, on the model's logits (as transformers' processors run)
      for (int j : seen_ids_)
        if (j < n) work_[j] = work_[j] > 0 ? work_[j] / rep : work_[j] * rep;
    for (const auto& [id, bias] : opt_.logit_bias)
      if (id < n) work_[id] += bias;
    if (penalised)
      for (int j : used_ids_)
        if (j < n) work_[j] -= opt_.frequency_penalty * counts_[j] + opt_.presence_penalty;
    if (too_early) {
      auto ban = [&](const std::vector<int>& ids) {
        for (int j : ids)
          if (j >= 0 && j < n) work_[j] = -std::numeric_limits<float>::infinity();
      };
      ban(s_.rt_.stop_ids());
      ban(opt_.stop_token_ids);
    }
    row = work_.data();
  }
  const int id = static_cast<int>(cpu::sample(row, n, opt_.sampling, u));
  if (lp) {
    // log-softmax of the raw row (float exponentials, a double sum), and the k most likely ids in one pass.
    float mx = logits[0];
    for (int64_t j = 1; j < n; ++j) mx = std::max(mx, logits[j]);
    double sum = 0;
    for (int64_t j = 0; j < n; ++j) sum += std::exp(logits[j] - mx);
    const double lse = mx + std::log(sum);
    lp->id = id;
    lp->logprob = static_cast<float>(logits[id] - lse);
    lp->top.clear();
    const int k = static_cast<int>(std::min<int64_t>(opt_.logprobs, n));
    if (k > 0) {
      // best[0..size) sorted most likely first (ties: lower id first, as ids arrive in order).
      std::vector<int> best;
      best.reserve(static_cast<size_t>(k) + 1);
      for (int64_t j = 0; j < n; ++j) {
        if (static_cast<int>(best.size()) == k && !(logits[j] > logits[best.back()])) continue;
        auto at = std::upper_bound(best.begin(), best.end(), logits[j], [&](float v, int b) { return v > logits[b]; });
        best.insert(at, static_cast<int>(j));
        if (static_cast<int>(best.size()) > k) best.pop_back();
      }
      for (int b : best) lp->top.emplace_back(b, static_cast<float>(logits[b] - lse));
    }
  }
  return id;
}

// Streams all text that cannot be the start of a stop string still being completed.
void GenerationSteps::flush(bool all) {
  const std::string& text = g_.text;
  size_t keep = 0;
  if (!all)
    for (auto& s : opt_.stop)
      for (size_t k = std::min(s.empty() ? 0 : s.size() - 1, text.size() - streamed_); k > keep; --k)
        if (text.compare(text.size() - k, k, s, 0, k) == 0) {
          keep = k;
          break;
        }
  const size_t upto = text.size() - keep;
  if (opt_.on_text && upto > streamed_) opt_.on_text(std::string_view(text).substr(streamed_, upto - streamed_));
  streamed_ = std::max(streamed_, upto);
}

void GenerationSteps::end(Generation::Finish f) {
  g_.finish = f;
  done_ = true;
  if (f != Generation::Finish::Stop) g_.text += dec_.finish();
  flush(true);
}

bool GenerationSteps::step() {
  if (done_) return false;
  if (s_.sampled_ >= 0) throw InvalidArgument("generate: the sampled token was not run before the next step");
  if (count_ >= opt_.max_tokens) {
    end(Generation::Finish::Length);
    return false;
  }
  if (opt_.cancel && opt_.cancel->load()) {
    end(Generation::Finish::Cancelled);
    return false;
  }
  ++count_;
  // Ids past the tokenizer's vocabulary (padding rows of the LM head) are not tokens: never sampled.
  const int64_t n = std::min<int64_t>(s_.rt_.config().vocab_size, static_cast<int64_t>(s_.rt_.tokenizer().vocab_size()));
  int id = -1;
  TokenLogprob lp;
  if (s_.presampled_ >= 0) {  // drawn by the batched run, with the draw taken at the end of the last step
    id = s_.presampled_;
  } else {
    const std::vector<float>& logits = s_.logits_;
    if (!s_.logits_valid_ || static_cast<int64_t>(logits.size()) < n)
      throw InvalidArgument("generate: no next-token logits to sample from");
    const double u = s_.next_draw_ ? s_.next_draw_->u : uniform_(s_.rng_);
    id = host_rule(count_) ? draw_on_host(logits, n, u, opt_.logprobs >= 0 ? &lp : nullptr)
                     : static_cast<int>(cpu::sample(logits.data(), n, opt_.sampling, u));
  }
  if (counted()) {
    if (counts_.size() <= static_cast<size_t>(id)) counts_.resize(static_cast<size_t>(n), 0);
    if (counts_[id]++ == 0) used_ids_.push_back(id);
  }
  if (!seen_.empty() && !seen_[id]) {
    seen_[id] = 1;
    seen_ids_.push_back(id);
  }
  s_.presampled_ = -1;
  s_.next_draw_.reset();
  g_.tokens.push_back(id);
  const auto& stops = s_.rt_.stop_ids();
  const auto& more = opt_.stop_token_ids;
  if ((!opt_.ignore_eos && std::find(stops.begin(), stops.end(), id) != stops.end()) ||
      std::find(more.begin(), more.end(), id) != more.end()) {
    s_.pending_.push_back(id);  // run with the next appended text, so the transcript stays exact
    end(Generation::Finish::Stop);
    return false;
  }
  const size_t before = g_.text.size();
  g_.text += dec_.push(id);
  // A stop string may end anywhere inside the new piece: search the region it could overlap.
  size_t cut = std::string::npos;
  for (auto& s : opt_.stop) {
    if (s.empty()) continue;
    const size_t from = before >= s.size() ? before - s.size() + 1 : 0;
    cut = std::min(cut, g_.text.find(s, from));
  }
  if (cut != std::string::npos) {
    g_.text.resize(cut);
    s_.pending_.push_back(id);
    end(Generation::Finish::Stop);
    return false;
  }
  if (opt_.logprobs >= 0) {
    if (opt_.on_logprob) opt_.on_logprob(lp);
    g_.logprobs.push_back(std::move(lp));
  }
  flush(false);
  s_.sampled_ = id;
  // The next token's draw is taken now (the same sequence of draws as sampling each step on the host), so
  // a batched run can draw it where the logits are. Not for the last token: its logits are kept. Nor when
  // the rule needs the logits row (logprobs, bias, penalties): then the batched run returns it.
  if (count_ < opt_.max_tokens && !host_rule(count_ + 1)) s_.next_draw_ = Engine::TokenDraw{opt_.sampling, uniform_(s_.rng_), n};
  return true;
}

}  // namespace hypic::sdk
