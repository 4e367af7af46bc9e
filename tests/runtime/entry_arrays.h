// Test helper: the arrays of a cache entry as raw bytes copied out of the backend's memory, named by layer,
// for bit-for-bit comparisons of two decodes of one record (the reference decode and the promotion path).
#pragma once
#include <map>
#include <string>
#include <vector>

#include "runtime/segment_entry.h"

namespace hypic::testing_util {

using EntryArrays = std::map<std::string, std::vector<char>>;

inline std::vector<char> raw(Backend& b, const void* p, size_t bytes) {
  std::vector<char> out(bytes);
  b.copy_to_host(p, out.data(), bytes);
  return out;
}

// Every array of the entry but `full` when the entry has none (its contents are then unspecified).
inline EntryArrays arrays_of(Backend& b, const SegmentEntry& e) {
  const ModelConfig& c = b.config();
  const size_t op = sizeof(float) * c.lin_v_heads * c.lin_k_dim * c.lin_k_dim;
  const size_t st = sizeof(float) * c.lin_v_heads * c.lin_k_dim * c.lin_v_dim;
  const size_t tail = dtype_size(b.kv_dtype()) * (c.conv_kernel - 1) * c.lin_conv_dim();
  const size_t rows = kv_row_bytes(b) * e.tokens.size();
  EntryArrays a;
  for (int l = 0; l < c.num_layers; ++l) {
    const std::string n = std::to_string(l);
    if (c.layer_kinds[l] == LayerKind::LinearAttention) {
      a["T" + n] = raw(b, e.linear[l].transfer, op);
      a["body" + n] = raw(b, e.linear[l].body, st);
      if (e.has_full) a["full" + n] = raw(b, e.linear[l].full, st);
      a["tail" + n] = raw(b, e.linear[l].conv_tail, tail);
    } else {
      a["k" + n] = raw(b, e.attention[l].k, rows);
      a["v" + n] = raw(b, e.attention[l].v, rows);
    }
  }
  return a;
}

inline EntryArrays arrays_of(Backend& b, const PrefixEntry& e) {
  const ModelConfig& c = b.config();
  const size_t st = sizeof(float) * c.lin_v_heads * c.lin_k_dim * c.lin_v_dim;
  const size_t tail = dtype_size(b.kv_dtype()) * (c.conv_kernel - 1) * c.lin_conv_dim();
  const size_t rows = kv_row_bytes(b) * e.pos.size();
  EntryArrays a;
  for (int l = 0; l < c.num_layers; ++l) {
    const std::string n = std::to_string(l);
    if (c.layer_kinds[l] == LayerKind::LinearAttention) {
      a["S" + n] = raw(b, e.state[l], st);
      a["tail" + n] = raw(b, e.conv_tail[l], tail);
    } else {
      a["k" + n] = raw(b, e.k[l], rows);
      a["v" + n] = raw(b, e.v[l], rows);
    }
  }
  return a;
}

// Zeroes transfer-operator head `head` of every linear layer of `e` (a short-memory head, which compact
// records leave out), so that records of it exercise the skipped-head path.
inline void zero_transfer_head(Backend& b, SegmentEntry& e, int head) {
  const ModelConfig& c = b.config();
  const size_t per_head = sizeof(float) * c.lin_k_dim * c.lin_k_dim;
  const std::vector<char> zeros(per_head, 0);
  for (int l = 0; l < c.num_layers; ++l)
    if (c.layer_kinds[l] == LayerKind::LinearAttention)
      b.copy_from_host(zeros.data(), reinterpret_cast<char*>(e.linear[l].transfer) + head * per_head, per_head);
}

}  // namespace hypic::testing_util
