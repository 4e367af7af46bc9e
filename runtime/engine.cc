#include "runtime/engine.h"

#include <algorithm>
#include <chrono>
#include <optional>

#include "runtime/error.h"
#include "runtime/segment_prefill.h"

namespace hypic {

const char* mode_name(CacheMode m) {
  switch (m) {
    case CacheMode::Full: return "full";
    case CacheMode::Prefix: return "prefix";
    case CacheMode::Hypic: return "hypic";
    case CacheMode::Naive: return "naive";
    case CacheMode::NoSeam: return "noseam";
  }
  return "?";
}

CacheMode parse_mode(const std::string& s) {
  for (CacheMode m : {CacheMode::Full, CacheMode::Prefix, CacheMode::Hypic, CacheMode::Naive, CacheMode::NoSeam})
    if (s == mode_name(m)) return m;
  throw InvalidArgument("unknown mode '" + s + "' (expected full, prefix, hypic, naive or noseam)");
}

void check_prompt(const std::vector<PromptBlock>& blocks) {
  if (blocks.empty() || blocks.back().tokens.empty()) throw InvalidArgument("a prompt needs a non-empty query tail");
  for (size_t i = 0; i + 1 < blocks.size(); ++i)
    if (blocks[i].tokens.empty()) throw InvalidArgument("block " + std::to_string(i) + " is empty");
}

std::vector<PromptBlock> cacheable_blocks(const std::vector<std::vector<int>>& blocks) {
  std::vector<PromptBlock> b;
  for (auto& t : blocks) b.push_back({t, BlockCache::Cache});
  return b;
}

KeyContext engine_key_context(const std::string& model_fingerprint, const EngineOptions& opt, CacheMode m) {
  if (opt.seam_width < 0) throw InvalidArgument("seam width must be >= 0");
  KeyContext k;
  k.model_fingerprint = model_fingerprint;
  k.tokenizer_fingerprint = opt.tokenizer_fingerprint;
  k.seam_width = m == CacheMode::NoSeam ? 0 : static_cast<int>(opt.seam_width);
  return k;
}

std::vector<int> prompt_tokens(const std::vector<PromptBlock>& blocks) {
  std::vector<int> all;
  for (auto& b : blocks) all.insert(all.end(), b.tokens.begin(), b.tokens.end());
  return all;
}

int64_t prompt_length(const std::vector<PromptBlock>& blocks) {
  int64_t n = 0;
  for (auto& b : blocks) n += static_cast<int64_t>(b.tokens.size());
  return n;
}

std::vector<BlockOutcome> computed_outcomes(const std::vector<PromptBlock>& blocks) {
  std::vector<BlockOutcome> out;
  for (size_t i = 0; i + 1 < blocks.size(); ++i) out.push_back({false, static_cast<int64_t>(blocks[i].tokens.size())});
  return out;
}

std::vector<SegmentKey> chain_keys(const KeyContext& keys, const std::vector<PromptBlock>& blocks) {
  std::vector<SegmentKey> chain(blocks.empty() ? 0 : blocks.size() - 1);
  std::optional<SegmentKey> parent;
  for (size_t i = 0; i < chain.size(); ++i) {
    chain[i] = chain_key(parent, content_key(keys, blocks[i].tokens));
    parent = chain[i];
  }
  return chain;
}

Engine::Engine(const HybridModel& model, CacheMode mode, EngineOptions opt)
    : model_(model),
      mode_(mode),
      opt_(std::move(opt)),
      keys_(engine_key_context(model.fingerprint(), opt_, mode)),
      store_(opt_.cache_budget_bytes) {}

PromptResult Engine::run(const std::vector<std::vector<int>>& blocks) { return run(cacheable_blocks(blocks)); }

PromptResult Engine::run(const std::vector<PromptBlock>& blocks) {
  check_prompt(blocks);
  const auto t0 = std::chrono::steady_clock::now();
  PromptResult r;
  switch (mode_) {
    case CacheMode::Full: r = run_full(blocks); break;
    case CacheMode::Prefix: r = run_prefix(blocks); break;
    default: r = run_pic(blocks); break;
  }
  r.ttft_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  r.prompt_tokens = prompt_length(blocks);
  return r;
}

PromptResult Engine::run_full(const std::vector<PromptBlock>& blocks) {
  PromptResult r;
  const std::vector<int> all = prompt_tokens(blocks);
  r.state = model_.new_state();
  r.logits = model_.forward(all, r.state);
  r.computed_tokens = static_cast<int64_t>(all.size());
  r.blocks = computed_outcomes(blocks);
  return r;
}

PromptResult Engine::run_prefix(const std::vector<PromptBlock>& blocks) {
  const ModelConfig& cfg = model_.config();
  const size_t k = blocks.size() - 1;
  const std::vector<SegmentKey> chain = chain_keys(keys_, blocks);
  // Longest run of cached block ends from the start; rebuild the exact state from it.
  PromptResult r;
  r.state = model_.new_state();
  size_t j = 0;
  for (; j < k; ++j) {
    if (blocks[j].cache == BlockCache::None) break;
    auto e = store_.find_chain(chain[j]);
    if (!e) break;
    for (int l = 0; l < cfg.num_layers; ++l) {
      if (cfg.layer_kinds[l] == LayerKind::LinearAttention) {
        r.state.layers[l].lin.conv_tail = e->conv_tail[l];
        r.state.layers[l].lin.S = e->state[l];
      } else {
        auto& kv = r.state.layers[l].attn;
        kv.k.insert(kv.k.end(), e->k[l].begin(), e->k[l].end());
        kv.v.insert(kv.v.end(), e->v[l].begin(), e->v[l].end());
        for (int64_t p = 0; p < e->length; ++p) kv.pos.push_back(e->start + p);
      }
    }
    r.state.length = e->start + e->length;
    r.blocks.push_back({true, e->length});
  }
  // Prefill the rest block by block, keeping a snapshot at every block end.
  for (size_t i = j; i < k; ++i) {
    const int64_t start = r.state.length;
    const int64_t n = static_cast<int64_t>(blocks[i].tokens.size());
    std::vector<size_t> kv_rows(cfg.num_layers);
    for (int l = 0; l < cfg.num_layers; ++l) kv_rows[l] = r.state.layers[l].attn.k.size();
    model_.forward(blocks[i].tokens, r.state);
    r.computed_tokens += n;
    r.blocks.push_back({false, n});
    if (blocks[i].cache == BlockCache::None) continue;
    auto e = std::make_shared<PrefixEntry>();
    e->start = start;
    e->length = n;
    e->conv_tail.resize(cfg.num_layers);
    e->state.resize(cfg.num_layers);
    e->k.resize(cfg.num_layers);
    e->v.resize(cfg.num_layers);
    for (int l = 0; l < cfg.num_layers; ++l) {
      const LayerState& ls = r.state.layers[l];
      if (cfg.layer_kinds[l] == LayerKind::LinearAttention) {
        e->conv_tail[l] = ls.lin.conv_tail;
        e->state[l] = ls.lin.S;
      } else {
        e->k[l].assign(ls.attn.k.begin() + kv_rows[l], ls.attn.k.end());
        e->v[l].assign(ls.attn.v.begin() + kv_rows[l], ls.attn.v.end());
      }
    }
    store_.put_chain(chain[i], std::move(e), blocks[i].cache == BlockCache::Pin);
  }
  r.logits = model_.forward(blocks.back().tokens, r.state);
  r.computed_tokens += static_cast<int64_t>(blocks.back().tokens.size());
  return r;
}

PromptResult Engine::run_pic(const std::vector<PromptBlock>& blocks) {
  const size_t k = blocks.size() - 1;
  PromptResult r;
  if (k == 0) {  // nothing to reuse
    return run_full(blocks);
  }
  std::vector<std::shared_ptr<const SegmentEntry>> segs;
  for (size_t i = 0; i < k; ++i) {
    const int64_t n = static_cast<int64_t>(blocks[i].tokens.size());
    if (blocks[i].cache == BlockCache::None) {
      // Never stored: the stitch recomputes all of its tokens under the true prefix (all seam).
      auto pass = std::make_shared<SegmentEntry>();
      pass->tokens = blocks[i].tokens;
      pass->seam = n;
      r.blocks.push_back({false, n});
      segs.push_back(std::move(pass));
      continue;
    }
    const SegmentKey key = content_key(keys_, blocks[i].tokens);
    auto e = store_.find_content(key);
    const bool hit = e != nullptr;
    if (!hit) {
      auto built = std::make_shared<SegmentEntry>(prefill_segment(model_, blocks[i].tokens, seam_width()));
      r.computed_tokens += built->size();
      store_.put_content(key, built, blocks[i].cache == BlockCache::Pin);
      e = built;
    }
    r.blocks.push_back({hit, e->size()});
    segs.push_back(std::move(e));
  }
  // The first block starts at position 0: its isolated run is exact, so its whole state is reused.
  SequenceState base = model_.new_state();
  if (blocks[0].cache != BlockCache::None) {
    base = state_from_first_segment(model_, *segs.front());
    segs.erase(segs.begin());
  }
  StitchResult s = stitch(model_, std::move(base), segs, blocks.back().tokens,
                          mode_ == CacheMode::Naive ? Composition::NaiveSum : Composition::Transfer);
  r.logits = std::move(s.logits);
  r.state = std::move(s.state);
  r.computed_tokens += s.computed_tokens;
  return r;
}

std::vector<int> Engine::greedy_decode(PromptResult& r, int n) const {
  std::vector<int> out;
  std::vector<float> logits = r.logits;
  for (int i = 0; i < n; ++i) {
    const int next = static_cast<int>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    out.push_back(next);
    if (i + 1 == n) break;
    const int one[1] = {next};
    logits = model_.forward(one, r.state);
  }
  return out;
}

}  // namespace hypic
