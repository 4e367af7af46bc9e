// Isolated prefill of one block (DESIGN §1.5): runs the block from a zero state at local positions
// 0..n-1 and records its cache entry — per linear layer the body's transfer operator and zero-start
// state, the whole-segment state and the trailing conv inputs; per attention layer every token's K/V.
#pragma once
#include <span>

#include "runtime/hybrid_model.h"
#include "runtime/segment_entry.h"

namespace hypic {

//
// With `context` (the exact state of a prefix), the block is run under that prefix instead: the entry
// then holds what the block contributes after exactly this prefix (keys moved back to local positions).
// Stitching such entries reproduces a full prefill; it is the "chain case" used to verify the stitch.
SegmentEntry prefill_segment(const HybridModel& model, std::span<const int> tokens, int64_t seam_width,
                             const SequenceState* context = nullptr);

// The exact state of a sequence that starts with this segment at position 0 (the first block of a
// prompt needs no seam: its isolated run is the true run).
SequenceState state_from_first_segment(const HybridModel& model, const SegmentEntry& e);

}  // namespace hypic
