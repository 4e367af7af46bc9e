// The caching engine on one CUDA device, the counterpart of runtime/engine.h: runs a prompt given as
// blocks of token ids (the last block is the query tail, never cached) in one of the modes of DESIGN §1.6
// against its own store of device-resident entries. Same keys (runtime/segment_key.h), block policies
// and outcome accounting as the CPU Engine; the cache budget is in bytes of device memory, and evicting
// an entry frees its device memory once no request holds it.
#pragma once
#include <memory>
#include <vector>

#include "runtime/cuda/cuda_model.h"
#include "runtime/cuda/cuda_segment_entry.h"
#include "runtime/engine.h"
#include "runtime/segment_store.h"

namespace hypic {

using CudaSegmentStore = BasicSegmentStore<CudaSegmentEntry, CudaPrefixEntry>;

struct CudaPromptResult {
  std::vector<float> logits;  // [V] for the first generated token (host)
  CudaSequenceState state;    // continues with decode
  int64_t prompt_tokens = 0;
  int64_t computed_tokens = 0;  // tokens run through the model for this request (misses included)
  double ttft_ms = 0;           // wall time of run(), ending after the device finished
  std::vector<BlockOutcome> blocks;  // one per cached block (all but the query)
};

class CudaEngine {
 public:
  CudaEngine(CudaModel& model, CacheMode mode, EngineOptions opt);

  // blocks.back() is the query tail (at least one token, never cached); the others follow their policy.
  CudaPromptResult run(const std::vector<PromptBlock>& blocks);
  // Every block but the query cacheable.
  CudaPromptResult run(const std::vector<std::vector<int>>& blocks);
  // Greedy decode of n tokens continuing `r` (the first comes from r.logits).
  std::vector<int> greedy_decode(CudaPromptResult& r, int n);

  CacheMode mode() const { return mode_; }
  CudaSegmentStore& store() { return store_; }
  int64_t seam_width() const { return keys_.seam_width; }

 private:
  CudaPromptResult run_full(const std::vector<PromptBlock>& blocks);
  CudaPromptResult run_prefix(const std::vector<PromptBlock>& blocks);
  CudaPromptResult run_pic(const std::vector<PromptBlock>& blocks);

  CudaModel& model_;
  CacheMode mode_;
  EngineOptions opt_;
  KeyContext keys_;
  CudaSegmentStore store_;
};

}  // namespace hypic
