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

// The rows a stitch runs over (CPU and CUDA alike): the seam tokens of every segment in order, then the
// query, at their global positions counted from `start`; where each segment starts; the positions of the
// segments' cached body rows, in order; the position after the query.
struct StitchRows {
  std::vector<int> ids;
  std::vector<int64_t> pos, starts, body_pos;
  int64_t end = 0;
};

template <class Entry>
StitchRows stitch_rows(int64_t start, const std::vector<std::shared_ptr<const Entry>>& segments,
                       std::span<const int> query) {
  StitchRows r;
  int64_t p = start;
  for (auto& s : segments) {
    r.starts.push_back(p);
    for (int64_t j = 0; j < s->seam; ++j) {
      r.ids.push_back(s->tokens[j]);
      r.pos.push_back(p + j);
    }
    for (int64_t j = s->seam; j < s->size(); ++j) r.body_pos.push_back(p + j);
    p += s->size();
  }
  for (size_t j = 0; j < query.size(); ++j) {
    r.ids.push_back(query[j]);
    r.pos.push_back(p + static_cast<int64_t>(j));
  }
  r.end = p + static_cast<int64_t>(query.size());
  return r;
}

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
