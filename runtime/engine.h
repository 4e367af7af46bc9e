// The caching engine (docs/engine.md): one engine on any backend. It runs a prompt given as blocks of
// token ids (the last block is the query tail, never cached) in one of the modes against its own
// segment store, and continues sequences (decode, appended text) — all through ONE layer loop driven by
// a plan of lanes (runtime/engine.cc).
//
// In prefix and hypic mode the longest exact prefix is reused first: the live state of the caller's
// sequence when the prompt extends its transcript, or chain entries at block ends. In hypic mode the
// blocks after it are composed from position-independent entries (transfer operators + seams); the
// missing ones are prefilled in isolation in the SAME pass as the stitch (their rows are extra lanes of
// the one layer loop), so a cold request costs about one prefill. A prompt may also run in steps of a
// token budget (Engine::begin, PromptJob), so a server can decode other sequences between them.
#pragma once
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "runtime/backend.h"
#include "runtime/entry_tiers.h"
#include "runtime/segment_store.h"

namespace hypic {

enum class CacheMode {
  Full,    // no cache: plain prefill of the whole prompt (quality reference)
  Prefix,  // exact reuse of the longest chain-key prefix at block boundaries (SGLang/vLLM-style)
  Hypic,   // longest exact prefix, then position-independent reuse: transfer operators + seams
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
  // Tiers below the store (host memory, disk): none unless a host budget or a disk store is given.
  EntryTierOptions tiers;
  // This fraction of the requests served with cache hits is recomputed in full mode afterwards (outside
  // its TTFT), and the first-token logits are compared (PromptResult::verify): a user can see that hits
  // are trustworthy. Deterministic: every (1 / rate)-th request with a hit.
  double verify_hits_rate = 0;
  // At construction, one throwaway forward pass of every power-of-two row count from 32 up to this many
  // rows (and this many): on the CUDA backend a pass's library GEMMs load their kernels and pick their
  // algorithms per power-of-two bucket of rows, a few milliseconds the first time each happens, which would
  // otherwise land on the first request of each size. 0: none (the default; on the CPU backend the passes
  // cost what a prefill of that size costs).
  int64_t warm_up_rows = 0;
};

// A request with hits checked against its full recompute.
struct HitCheck {
  bool checked = false;
  int64_t hit_blocks = 0;   // blocks served from the cache in the checked request
  double kl = 0;            // KL(full || cached) of the first-token distributions
  bool top1_agrees = false;  // the same most likely first token
};

struct BlockOutcome {
  bool hit = false;  // served from the store or a live state instead of being computed
  int64_t tokens = 0;
};

struct PromptResult {
  std::vector<float> logits;     // [V] for the first generated token
  std::unique_ptr<State> state;  // continues with decode
  int64_t prompt_tokens = 0;
  int64_t reused_tokens = 0;    // leading tokens taken exactly from a live state or chain entries
  int64_t computed_tokens = 0;  // tokens run through the model for this request (misses included)
  double ttft_ms = 0;           // wall time of run(), ending after the device finished
  std::vector<BlockOutcome> blocks;  // one per cached block (all but the query)
  HitCheck verify;                   // with EngineOptions::verify_hits_rate
};

// A sequence the caller holds (a session's live state) and every token it has run, in order. When a
// prompt's tokens start with all of `tokens`, run() continues `state` (taking it) instead of recomputing.
struct LiveSequence {
  std::unique_ptr<State> state;
  std::vector<int> tokens;
};

// Throws InvalidArgument unless the prompt has a non-empty query tail and no empty block.
void check_prompt(const std::vector<PromptBlock>& blocks);
// Throws InvalidArgument for an id outside [0, cfg.vocab_size), naming its index and `where`.
void check_token_ids(const ModelConfig& cfg, std::span<const int> ids, const std::string& where);
// What a run refuses before it touches any state: check_prompt, every block's ids, the prompt's length.
void check_prompt_for(const ModelConfig& cfg, const std::vector<PromptBlock>& blocks);
// Greedy continuation: the arg-max of `first`, then n - 1 more, each the arg-max of step(previous token);
// stops after `eos` when eos >= 0.
std::vector<int> greedy_tokens(std::vector<float> first, int64_t n, int64_t eos,
                               const std::function<std::vector<float>(int)>& step);
// Token lists as blocks, every block but the query cacheable.
std::vector<PromptBlock> cacheable_blocks(const std::vector<std::vector<int>>& blocks);
std::vector<int> prompt_tokens(const std::vector<PromptBlock>& blocks);

class Engine;

// A prompt run in steps (Engine::begin): each step() runs about `token_budget` of its tokens through the
// model, so a caller can run other work (a server: the decode steps of running generations) between
// them. The steps follow the one-pass plan in order: the missing blocks' isolated prefills (several per
// step up to the budget; a block is never split, so a block larger than the budget is a step of its own),
// then the rows of the main sequence (the stitch's seams and new rows, or in full and prefix modes the
// uncached prompt) in chunks of the budget, each a continuation of the state the previous one left.
// The result is the one-pass run's (Engine::run is begin, then step until done, then finish).
// Entries a step builds are stored when it ends, so they stay valid if the job is dropped or a later step
// fails; the engine must outlive the job.
class PromptJob {
 public:
  ~PromptJob();
  PromptJob(const PromptJob&) = delete;
  PromptJob& operator=(const PromptJob&) = delete;

  // Runs the next piece of work of about `token_budget` (>= 1) tokens. Returns whether work remains.
  // InvalidArgument for a budget < 1; after a step that threw, the job refuses every call (drop it).
  bool step(int64_t token_budget);
  bool done() const;
  // Tokens the model still has to run for this prompt, and in all (PromptResult::computed_tokens).
  int64_t remaining_tokens() const;
  int64_t total_tokens() const;
  // Steps run so far.
  int64_t steps() const;
  // The prompt's tokens, in order.
  const std::vector<int>& prompt() const;
  // The result once done (its ttft_ms spans begin to the end of the last step); once.
  PromptResult finish();

 private:
  friend class Engine;
  struct Work;
  explicit PromptJob(std::unique_ptr<Work> w);
  std::unique_ptr<Work> w_;
};

class Engine {
 public:
  Engine(Backend& backend, CacheMode mode, EngineOptions opt);
  ~Engine();

  // blocks.back() is the query tail (at least one token, never cached); the others follow their policy.
  // `live`, when given, may be continued (its state is then moved into the result). `key_namespace`
  // (a tenant: a server's API key and cache salt) is hashed into every segment key the request looks up
  // or stores, so requests of one namespace never reuse another's entries; empty: the shared namespace.
  PromptResult run(const std::vector<PromptBlock>& blocks, LiveSequence* live = nullptr,
                   const std::string& key_namespace = {});
  // The same prompt as a job run in steps (PromptJob). The prompt is checked here (InvalidArgument before
  // `live` is touched), cache lookups are made and a reused prefix is loaded; `live` is only read during
  // this call.
  std::unique_ptr<PromptJob> begin(const std::vector<PromptBlock>& blocks, LiveSequence* live = nullptr,
                                   const std::string& key_namespace = {});
  // Every block but the query cacheable.
  PromptResult run(const std::vector<std::vector<int>>& blocks);

  // Continues `st` with `ids` (prefill, appended text, decode: the same call). Returns the logits of the
  // last token ([V]), or of every token ([T, V]) when all_logits. Throws InvalidArgument for no tokens
  // or an id outside the vocabulary.
  std::vector<float> forward(std::span<const int> ids, State& st, bool all_logits = false);
  // One decode step of several sequences in one pass (one lane of one row each, so the projections, the
  // MoE and the LM head run once over the batch): states[i] continues with ids[i]. Returns [N, V] logits,
  // row i for sequence i. InvalidArgument for a size mismatch, a repeated state or an id outside the
  // vocabulary.
  std::vector<float> decode_batch(std::span<State* const> states, std::span<const int> ids);
  // decode_batch for a server's generations: row i with draws[i] gets its next token drawn where the logits
  // are (on the device for the CUDA backend: no [N, V] copy to the host), into sampled[i], and logits[i]
  // stays empty; a row without a draw returns its logits in logits[i]. The same tokens on every backend
  // for the same draws (the CPU fallback draws with cpu::sample), up to float rounding at the edge
  // between two kept ids. InvalidArgument as decode_batch, and for a draw with vocab outside [1, V].
  using TokenDraw = Backend::TokenDraw;
  void decode_batch_drawn(std::span<State* const> states, std::span<const int> ids,
                          std::span<const TokenDraw* const> draws, std::span<int> sampled,
                          std::vector<std::vector<float>>& logits);
  // The warm-up passes of EngineOptions::warm_up_rows (run by the constructor when it is set): throwaway
  // states, nothing stored. Returns the passes run.
  int warm_up(int64_t max_rows);
  // Greedy decode of n tokens continuing `r` (the first comes from r.logits).
  std::vector<int> greedy_decode(PromptResult& r, int n);

  // ---- building blocks, for verification (a cache hit against recomputation) ----
  // The entry of `tokens` prefilled in isolation (from zero at position 0), or after exactly `context`
  // (a copy of it is continued; keys are moved back to local positions): stitching entries built under
  // their true prefixes reproduces a full prefill.
  std::shared_ptr<SegmentEntry> prefill_segment(std::span<const int> tokens, const State* context = nullptr);
  // The entries of several blocks prefilled in isolation in ONE pass (a lane per block, as run() builds
  // its missing blocks): entry i is blocks[i]'s, as prefill_segment(blocks[i]) makes it. The store is not
  // touched (runtime/cold_scatter.h places such passes on several backends and stores the results).
  std::vector<std::shared_ptr<SegmentEntry>> prefill_segments(const std::vector<std::vector<int>>& blocks);
  // The stitch pass alone: `segments` composed in order after `base` (taken), then the query.
  PromptResult stitch(std::unique_ptr<State> base, const std::vector<const SegmentEntry*>& segments,
                      std::span<const int> query, Composition how = Composition::Transfer);

  CacheMode mode() const { return mode_; }
  Backend& backend() { return backend_; }
  SegmentStore& store() { return store_; }
  // The tiers below the store, or null when there are none.
  EntryTiers* tiers() { return tiers_.get(); }
  int64_t seam_width() const { return keys_.seam_width; }
  const KeyContext& keys() const { return keys_; }
  // The key context of requests in `key_namespace` (run()'s third argument): content_key(keys_for(ns),
  // tokens) is the key under which run() looks a block up.
  KeyContext keys_for(const std::string& key_namespace) const;

 private:
  friend class PromptJob;
  // decode_batch's checks (throws InvalidArgument).
  void check_batch(std::span<State* const> states, std::span<const int> ids) const;
  struct Plan;
  // Plans the prompt into `w` (cache lookups, the reused prefix loaded, the lanes still to run).
  void plan_full(PromptJob::Work& w, const std::vector<PromptBlock>& blocks);
  void plan_cached(PromptJob::Work& w, const std::vector<PromptBlock>& blocks, LiveSequence* live,
                   const KeyContext& keys);
  std::vector<float> execute(Plan& plan);
  // HYPIC_PROFILE=1 in the environment: every step of a request is synchronised and timed, and the
  // totals per step go to stderr after the request (a diagnostic: the synchronisations slow it down).
  // HYPIC_PROFILE=host: the host's time to issue each step instead (no synchronisation; where the host,
  // not the device, sets the pace).
  struct Profile;
  void mark(const char* step);
  // HYPIC_PROFILE: prints the steps' times since the last report (stderr) and starts over.
  void report_profile(double total_ms);

  Backend& backend_;
  std::unique_ptr<Profile> prof_;
  CacheMode mode_;
  EngineOptions opt_;
  KeyContext keys_;
  SegmentStore store_;
  std::shared_ptr<EntryTiers> tiers_;
  double verify_credit_ = 0;  // verify_hits_rate accumulated over requests with hits
};

}  // namespace hypic
