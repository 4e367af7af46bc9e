// The caching engine: runs a prompt given as blocks of token ids (the last block is the query tail,
// never cached) in one of the modes of DESIGN §1.6, against its own segment store.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "runtime/hybrid_model.h"
#include "runtime/segment_store.h"
#include "runtime/stitch.h"

namespace hypic {

enum class CacheMode {
  Full,    // no cache: plain prefill of the whole prompt (quality reference)
  Prefix,  // exact reuse of the longest chain-key prefix at block boundaries (SGLang/vLLM-style)
  Hypic,   // position-independent reuse: first block exact, transfer operators + seams for the rest
  Naive,   // ablation: S = S_prefix + S_body (no transfer operator)
  NoSeam,  // ablation: seam width 0
};

const char* mode_name(CacheMode m);
CacheMode parse_mode(const std::string& s);  // throws InvalidArgument

// How a block may be cached: pin (never evicted), cache (LRU), none (always computed, never stored).
enum class BlockCache { Pin, Cache, None };

struct PromptBlock {
  std::vector<int> tokens;
  BlockCache cache = BlockCache::Cache;
};

struct EngineOptions {
  int64_t seam_width = 8;
  size_t cache_budget_bytes = size_t{1} << 30;
  std::string tokenizer_fingerprint;  // part of every key
};

struct BlockOutcome {
  bool hit = false;  // served from the store (content or chain) instead of being computed
  int64_t tokens = 0;
};

struct PromptResult {
  std::vector<float> logits;  // [V] for the first generated token
  SequenceState state;        // continues with decode
  int64_t prompt_tokens = 0;
  int64_t computed_tokens = 0;  // tokens run through the model for this request (misses included)
  double ttft_ms = 0;
  std::vector<BlockOutcome> blocks;  // one per cached block (all but the query)
};

// ---- what every engine (this CPU Engine, CudaEngine) shares ----
// Throws InvalidArgument unless the prompt has a non-empty query tail and no empty block.
void check_prompt(const std::vector<PromptBlock>& blocks);
// Token lists as blocks, every block but the query cacheable.
std::vector<PromptBlock> cacheable_blocks(const std::vector<std::vector<int>>& blocks);
// The keys of an engine in mode m: model and tokenizer fingerprints and the mode's seam width (0 for
// noseam). Throws InvalidArgument for a negative seam width.
KeyContext engine_key_context(const std::string& model_fingerprint, const EngineOptions& opt, CacheMode m);
// Every token of the prompt, in order, and how many there are; the outcomes of its cached blocks when all
// were computed.
std::vector<int> prompt_tokens(const std::vector<PromptBlock>& blocks);
int64_t prompt_length(const std::vector<PromptBlock>& blocks);
std::vector<BlockOutcome> computed_outcomes(const std::vector<PromptBlock>& blocks);
// Chain keys of the cached blocks (all but the query), each over the blocks before it.
std::vector<SegmentKey> chain_keys(const KeyContext& keys, const std::vector<PromptBlock>& blocks);

class Engine {
 public:
  Engine(const HybridModel& model, CacheMode mode, EngineOptions opt);

  // blocks.back() is the query tail (at least one token, never cached); the others follow their policy.
  PromptResult run(const std::vector<PromptBlock>& blocks);
  // Every block but the query cacheable.
  PromptResult run(const std::vector<std::vector<int>>& blocks);
  // Greedy decode of n tokens continuing `r` (the first comes from r.logits).
  std::vector<int> greedy_decode(PromptResult& r, int n) const;

  CacheMode mode() const { return mode_; }
  SegmentStore& store() { return store_; }
  int64_t seam_width() const { return keys_.seam_width; }

 private:
  PromptResult run_full(const std::vector<PromptBlock>& blocks);
  PromptResult run_prefix(const std::vector<PromptBlock>& blocks);
  PromptResult run_pic(const std::vector<PromptBlock>& blocks);

  const HybridModel& model_;
  CacheMode mode_;
  EngineOptions opt_;
  KeyContext keys_;
  SegmentStore store_;
};

}  // namespace hypic
