// The running state of one sequence on the CPU backend: per linear-attention layer the conv tail and the
// recurrent state, per full-attention layer the keys (post-norm, post-RoPE) and values with their global
// positions. fp32 throughout.
#pragma once
#include <cstdint>
#include <vector>

#include "runtime/backend.h"
#include "runtime/model_config.h"

namespace hypic {

struct LinearLayerState {
  std::vector<float> conv_tail;  // [K-1, conv_dim]: the last K-1 pre-conv inputs, oldest first
  std::vector<float> S;          // [Hv, dk, dv] fp32
};

struct AttentionLayerState {
  std::vector<float> k;    // [rows, Hkv, hd]
  std::vector<float> v;    // [rows, Hkv, hd]
  std::vector<int64_t> pos;  // [rows] global positions (rows need not be sorted)
  int64_t rows() const { return static_cast<int64_t>(pos.size()); }
};

struct LayerState {
  LinearLayerState lin;
  AttentionLayerState attn;
};

class SequenceState : public State {
 public:
  std::vector<LayerState> layers;

  static SequenceState empty_for(const ModelConfig& cfg);
  size_t bytes() const override;
};

// The CPU state behind a State handle (asserts that it is one).
SequenceState& cpu_state(State& s);
const SequenceState& cpu_state(const State& s);

}  // namespace hypic
