#include "runtime/sequence_state.h"

#include "runtime/error.h"

namespace hypic {

SequenceState SequenceState::empty_for(const ModelConfig& cfg) {
  SequenceState s;
  s.layers.resize(static_cast<size_t>(cfg.num_layers));
  for (int64_t i = 0; i < cfg.num_layers; ++i) {
    if (cfg.layer_kinds[i] != LayerKind::LinearAttention) continue;
    s.layers[i].lin.conv_tail.assign(static_cast<size_t>((cfg.conv_kernel - 1) * cfg.lin_conv_dim()), 0.0f);
    s.layers[i].lin.S.assign(static_cast<size_t>(cfg.lin_v_heads * cfg.lin_k_dim * cfg.lin_v_dim), 0.0f);
  }
  return s;
}

size_t SequenceState::bytes() const {
  size_t n = 0;
  for (auto& l : layers)
    n += (l.lin.conv_tail.size() + l.lin.S.size() + l.attn.k.size() + l.attn.v.size()) * sizeof(float) +
         l.attn.pos.size() * sizeof(int64_t);
  return n;
}

SequenceState& cpu_state(State& s) {
  auto* c = dynamic_cast<SequenceState*>(&s);
  HYPIC_ASSERT(c, "a state of another backend given to the CPU backend");
  return *c;
}

const SequenceState& cpu_state(const State& s) {
  auto* c = dynamic_cast<const SequenceState*>(&s);
  HYPIC_ASSERT(c, "a state of another backend given to the CPU backend");
  return *c;
}

}  // namespace hypic
