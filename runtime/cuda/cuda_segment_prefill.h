// Isolated prefill of one block on the device (DESIGN §1.5), the counterpart of
// runtime/segment_prefill.h: runs the block from a zero state at local positions 0..n-1 and records its
// cache entry — per linear layer the body's transfer operator (built in the same chunked delta-rule pass)
// and zero-start state, the whole-segment state and the trailing conv inputs; per attention layer every
// token's K/V.
#pragma once
#include <span>

#include "runtime/cuda/cuda_model.h"
#include "runtime/cuda/cuda_segment_entry.h"

namespace hypic {

// With `context` (the exact state of a prefix), the block runs under that prefix instead: the entry then
// holds what the block contributes after exactly this prefix (keys moved back to local positions), the
// "chain case" that reproduces a full prefill when stitched. `context` is not modified.
CudaSegmentEntry prefill_segment(CudaModel& model, std::span<const int> tokens, int64_t seam_width,
                                 const CudaSequenceState* context = nullptr);

// The exact state of a sequence that starts with this segment at position 0.
CudaSequenceState state_from_first_segment(CudaModel& model, const CudaSegmentEntry& e);

}  // namespace hypic
