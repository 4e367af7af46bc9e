// What the cache keeps for one segment (docs/engine.md), on any backend. Every array of an entry lives
// in ONE block of the backend's memory (host or device), so an entry costs one allocation and evicting
// its last reference frees it at once. Element types: states and operators fp32; conv tails and K/V rows
// the backend's kv_dtype().
//
// SegmentEntry (position-independent, keyed by content key) is produced by an isolated prefill of the
// block from a zero state at local positions 0..n-1. The first `seam` tokens are the seam: on reuse as
// an internal segment they are recomputed under the true prefix, and the body (tokens seam..n-1) is
// applied through its transfer operator.
//
// PrefixEntry (exact, keyed by chain key) is the state after a block under exactly its prefix: the
// linear-layer states at the block end and the K/V rows of the blocks it covers (first_block up to this
// block; the rows of earlier blocks are in the entries of their own chain keys).
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "runtime/backend.h"

namespace hypic {

struct LinearSegmentState {
  float* transfer = nullptr;   // [Hv, dk, dk] T of the body
  float* body = nullptr;       // [Hv, dk, dv] S(body | 0), body read with its own conv context
  float* full = nullptr;       // [Hv, dk, dv] state after the whole segment from zero (segment first)
  void* conv_tail = nullptr;   // [K-1, conv_dim] the segment's last pre-conv inputs
};

struct AttentionSegmentKV {
  void* k = nullptr;  // [n, Hkv, hd] post-norm keys rotated at local positions 0..n-1
  void* v = nullptr;  // [n, Hkv, hd]
};

struct SegmentEntry {
  std::vector<int> tokens;
  int64_t seam = 0;  // seam tokens actually skipped: min(seam width, n)
  // False for an entry decoded from a compact record, which leaves out `full` (linear[l].full is then
  // zeros and must not be read): as the first block it is used like any other, its seam recomputed.
  bool has_full = true;
  std::unique_ptr<Memory> mem;                // holds every array below (null for a pass-through)
  std::vector<LinearSegmentState> linear;     // indexed by layer (null for attention layers)
  std::vector<AttentionSegmentKV> attention;  // indexed by layer (null for linear layers)

  // An entry with its arrays allocated on `b` (contents undefined).
  static SegmentEntry allocate(Backend& b, std::vector<int> tokens, int64_t seam);
  int64_t size() const { return static_cast<int64_t>(tokens.size()); }
  size_t bytes() const { return (mem ? mem->bytes() : 0) + tokens.size() * sizeof(int); }
};

struct PrefixEntry {
  int64_t first_block = 0;   // index of the first block whose K/V rows this entry holds
  std::vector<int64_t> pos;  // [rows] global positions of the K/V rows
  std::unique_ptr<Memory> mem;
  std::vector<float*> state;     // per layer [Hv, dk, dv] at the block end (linear layers)
  std::vector<void*> conv_tail;  // per layer [K-1, conv_dim] (linear layers)
  std::vector<void*> k, v;       // per layer [rows, Hkv, hd] (attention layers)

  static PrefixEntry allocate(Backend& b, int64_t rows);
  int64_t rows() const { return static_cast<int64_t>(pos.size()); }
  size_t bytes() const { return (mem ? mem->bytes() : 0) + pos.size() * sizeof(int64_t); }
};

// Byte offset of K/V row `row` in an entry array of backend `b`.
size_t kv_row_bytes(const Backend& b);
inline void* kv_row(void* base, const Backend& b, int64_t row) {
  return static_cast<char*>(base) + static_cast<size_t>(row) * kv_row_bytes(b);
}

}  // namespace hypic
