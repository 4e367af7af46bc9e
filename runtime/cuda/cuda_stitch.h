// The stitch pass on the device (DESIGN §1.4), the counterpart of runtime/stitch.h: one forward over the
// active tokens only — the seam tokens of every internal segment plus the query tail — composing cached
// linear states through transfer operators (S = T_body S + S_body) and assembling cached keys,
// re-rotated by each segment's start, for the attention layers.
#pragma once
#include <memory>
#include <span>
#include <vector>

#include "runtime/cuda/cuda_model.h"
#include "runtime/cuda/cuda_segment_entry.h"
#include "runtime/stitch.h"

namespace hypic {

struct CudaStitchResult {
  std::vector<float> logits;  // [V] of the last token
  CudaSequenceState state;    // ready for decode
  int64_t computed_tokens = 0;
};

// `base`: the exact state of the prompt's prefix (e.g. the first segment's); `segments`: the cached
// internal segments that follow it, in order; `query`: the uncached tail (at least one token).
CudaStitchResult stitch(CudaModel& model, CudaSequenceState base,
                        const std::vector<std::shared_ptr<const CudaSegmentEntry>>& segments,
                        std::span<const int> query, Composition mode = Composition::Transfer);

}  // namespace hypic
