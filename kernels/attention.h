// Softmax attention with grouped KV heads, causal by global position (keys may come from several
// cached segments plus fresh tokens, in any order).
#pragma once
#include <cstdint>

namespace hypic::cpu {

struct AttentionShape {
  int64_t Tq;   // query rows
  int64_t Tk;   // key/value rows
  int64_t Hq;   // query heads
  int64_t Hkv;  // key/value heads (Hq % Hkv == 0; query head h reads kv head h / (Hq / Hkv))
  int64_t d;    // q/k head dim
  int64_t dv;   // v head dim
};

// q: [Tq, Hq, d]; k: [Tk, Hkv, d]; v: [Tk, Hkv, dv]; q_pos: [Tq]; k_pos: [Tk];
// key j is visible to query i iff k_pos[j] <= q_pos[i]. out: [Tq, Hq, dv].
// A query that sees no key gets a zero output.
void attention(const AttentionShape& s, const float* q, const float* k, const float* v,
               const int64_t* q_pos, const int64_t* k_pos, float scale, float* out);

}  // namespace hypic::cpu
