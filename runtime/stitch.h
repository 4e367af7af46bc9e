// The stitch pass (DESIGN §1.4): one forward over the active tokens only — the seam tokens of every
// internal segment plus the query tail — composing cached linear states through transfer operators
// and assembling cached (re-rotated) keys for the attention layers.
#pragma once
#include <memory>
#include <span>
#include <vector>

#include "runtime/hybrid_model.h"
#include "runtime/segment_entry.h"

namespace hypic {

enum class Composition {
  Transfer,  // S = T_body S + S_body  (hypic)
  NaiveSum,  // S = S + S_body         (ablation: what simple linear-attention PIC does)
};

struct StitchResult {
  std::vector<float> logits;  // [V] of the last token
  SequenceState state;        // ready for decode
  int64_t computed_tokens = 0;
};

// `base`: the exact state of the prompt's prefix (e.g. the first segment's); `segments`: the cached
// internal segments that follow it, in order; `query`: the uncached tail (at least one token).
StitchResult stitch(const HybridModel& model, SequenceState base,
                    const std::vector<std::shared_ptr<const SegmentEntry>>& segments, std::span<const int> query,
                    Composition mode = Composition::Transfer);

}  // namespace hypic
