// What the cache keeps for one segment (DESIGN §1.2-1.3).
//
// SegmentEntry (position-independent, keyed by content key) is produced by an isolated prefill of the
// block from a zero state at local positions 0..n-1. The first `seam` tokens are the seam: on reuse as
// an internal segment they are recomputed under the true prefix, and the body (tokens seam..n-1) is
// applied through its transfer operator.
//
// PrefixEntry (exact, keyed by chain key) is the state after a block under exactly its prefix: the
// linear-layer states at the block end and the block's own KV rows (the prefix-cache baseline).
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

namespace hypic {

struct LinearSegmentState {
  std::vector<float> transfer;   // [Hv, dk, dk] T of the body
  std::vector<float> body;       // [Hv, dk, dv] S(body | 0), body read with its own conv context
  std::vector<float> full;       // [Hv, dk, dv] state after the whole segment from zero (segment first)
  std::vector<float> conv_tail;  // [K-1, conv_dim] the segment's last pre-conv inputs
};

struct AttentionSegmentKV {
  std::vector<float> k;  // [n, Hkv, hd] post-norm keys rotated at local positions 0..n-1
  std::vector<float> v;  // [n, Hkv, hd]
};

struct SegmentEntry {
  std::vector<int> tokens;
  int64_t seam = 0;  // seam tokens actually skipped: min(seam width, n)
  std::vector<LinearSegmentState> linear;   // indexed by layer (empty for attention layers)
  std::vector<AttentionSegmentKV> attention;  // indexed by layer (empty for linear layers)

  int64_t size() const { return static_cast<int64_t>(tokens.size()); }
  size_t bytes() const;
};

struct PrefixEntry {
  int64_t start = 0, length = 0;  // the block's global positions [start, start + length)
  std::vector<std::vector<float>> conv_tail, state;  // per layer, at the block end (linear layers)
  std::vector<std::vector<float>> k, v;               // per layer, this block's KV rows (attention layers)
  size_t bytes() const;
};

}  // namespace hypic
