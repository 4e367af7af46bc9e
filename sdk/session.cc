#include "sdk/session.h"

#include <algorithm>
#include <chrono>

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
  PromptResult r;
  try {
    r = rt_.engine().run(blocks, live.state ? &live : nullptr);
  } catch (...) {
    // A refused prompt (checked before any state is touched) leaves the conversation as it was.
    if (live.state && !state_) {
      state_ = std::move(live.state);
      transcript_ = std::move(live.tokens);
    }
    throw;
  }
  state_ = std::move(r.state);
  transcript_ = prompt;
  checkpoint_ = LiveSequence();
  if (checkpoint_on_) checkpoint_ = {rt_.backend().clone(*state_), transcript_};
  logits_ = r.logits;
  pending_.clear();
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
  transcript_.insert(transcript_.end(), run.begin(), run.end());
  pending_.clear();
  started_ = true;
}

void Session::append_text(const std::string& text) {
  const std::vector<int> ids = rt_.tokenizer().encode(text);
  append_tokens(ids);
}

Generation Session::generate(const GenerateOptions& opt) {
  if (!started_) throw InvalidArgument("generate: the session has no prompt yet");
  if (!pending_.empty()) append_tokens({});
  rng_.seed(opt.seed);
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  const auto& stops = rt_.stop_ids();
  StreamingDecoder dec(rt_.tokenizer());
  Generation g;
  size_t streamed = 0;  // bytes of g.text already given to on_text
  // Streams all text that cannot be the start of a stop string still being completed.
  auto flush = [&](bool all) {
    size_t keep = 0;
    if (!all)
      for (auto& s : opt.stop)
        for (size_t k = std::min(s.empty() ? 0 : s.size() - 1, g.text.size() - streamed); k > keep; --k)
          if (g.text.compare(g.text.size() - k, k, s, 0, k) == 0) {
            keep = k;
            break;
          }
    const size_t upto = g.text.size() - keep;
    if (opt.on_text && upto > streamed) opt.on_text(std::string_view(g.text).substr(streamed, upto - streamed));
    streamed = std::max(streamed, upto);
  };
  for (int i = 0; i < opt.max_tokens; ++i) {
    if (opt.cancel && opt.cancel->load()) {
      g.finish = Generation::Finish::Cancelled;
      break;
    }
    const int id = static_cast<int>(
        cpu::sample(logits_.data(), static_cast<int64_t>(logits_.size()), opt.sampling, uniform(rng_)));
    g.tokens.push_back(id);
    if (std::find(stops.begin(), stops.end(), id) != stops.end()) {
      pending_.push_back(id);  // run with the next appended text, so the transcript stays exact
      g.finish = Generation::Finish::Stop;
      break;
    }
    const size_t before = g.text.size();
    g.text += dec.push(id);
    // A stop string may end anywhere inside the new piece: search the region it could overlap.
    size_t cut = std::string::npos;
    for (auto& s : opt.stop) {
      if (s.empty()) continue;
      const size_t from = before >= s.size() ? before - s.size() + 1 : 0;
      cut = std::min(cut, g.text.find(s, from));
    }
    if (cut != std::string::npos) {
      g.text.resize(cut);
      pending_.push_back(id);
      g.finish = Generation::Finish::Stop;
      break;
    }
    flush(false);
    const int one[1] = {id};
    logits_ = rt_.engine().forward(one, *state_);
    transcript_.push_back(id);
  }
  if (g.finish != Generation::Finish::Stop) g.text += dec.finish();
  flush(true);
  return g;
}

}  // namespace hypic::sdk
