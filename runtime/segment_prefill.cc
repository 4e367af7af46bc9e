#include "runtime/segment_prefill.h"

#include <numeric>

#include "kernels/rope.h"
#include "kernels/transfer_operator.h"
#include "runtime/error.h"

namespace hypic {

SegmentEntry prefill_segment(const HybridModel& model, std::span<const int> tokens, int64_t seam_width,
                             const SequenceState* context) {
  const ModelConfig& cfg = model.config();
  const int64_t n = static_cast<int64_t>(tokens.size()), D = cfg.hidden_size;
  if (n == 0) throw InvalidArgument("cannot cache an empty block");
  cfg.check_length((context ? context->length : 0) + n);
  const int64_t w = std::min<int64_t>(std::max<int64_t>(seam_width, 0), n);
  SegmentEntry e;
  e.tokens.assign(tokens.begin(), tokens.end());
  e.seam = w;
  e.linear.resize(cfg.num_layers);
  e.attention.resize(cfg.num_layers);

  const cpu::TransferShape ts{cpu::TransferKind::Dense, cfg.lin_v_heads, cfg.lin_k_dim, cfg.lin_v_dim};
  SequenceState st = context ? *context : model.new_state();
  const int64_t start = st.length;
  std::vector<float> h(n * D), x(n * D), y(n * D);
  model.embed(tokens, h.data());
  std::vector<int64_t> pos(n);
  std::iota(pos.begin(), pos.end(), start);
  for (int l = 0; l < cfg.num_layers; ++l) {
    model.input_norm(l, h.data(), n, x.data());
    if (cfg.layer_kinds[l] == LayerKind::LinearAttention) {
      LinearLayerState& ls = st.layers[l].lin;
      LinearSegmentState& out = e.linear[l];
      if (w > 0) model.linear_mixer(l, x.data(), w, ls, y.data());
      const std::vector<float> seam_state = ls.S;
      out.transfer.resize(cpu::transfer_numel(ts));
      cpu::transfer_identity(ts, out.transfer.data());
      if (n > w) model.linear_mixer(l, x.data() + w * D, n - w, ls, y.data() + w * D, out.transfer.data());
      out.full = ls.S;  // the state after the segment (from zero, or under `context`)
      // S(body | 0) = S_full - T_body S_seam: the body's outputs above were computed from the true
      // running state, and the zero-start state follows from linearity.
      std::vector<float> carried(ls.S.size(), 0.0f);
      const std::vector<float> zero(ls.S.size(), 0.0f);
      cpu::transfer_apply(ts, out.transfer.data(), seam_state.data(), zero.data(), carried.data());
      out.body.resize(ls.S.size());
      for (size_t i = 0; i < carried.size(); ++i) out.body[i] = out.full[i] - carried[i];
      out.conv_tail = ls.conv_tail;
    } else {
      AttentionLayerState& kv = st.layers[l].attn;
      const size_t r0 = kv.k.size();
      model.attention_mixer(l, x.data(), n, pos.data(), kv, y.data());
      e.attention[l].k.assign(kv.k.begin() + r0, kv.k.end());
      e.attention[l].v.assign(kv.v.begin() + r0, kv.v.end());
      cpu::rope_shift(e.attention[l].k.data(), n, cfg.num_kv_heads, cfg.head_dim, cfg.rotary_dim, -start,
                      cfg.rope_theta);
    }
    for (int64_t i = 0; i < n * D; ++i) h[i] += y[i];
    model.post_norm(l, h.data(), n, x.data());
    model.ffn(l, x.data(), n, y.data());
    for (int64_t i = 0; i < n * D; ++i) h[i] += y[i];
  }
  return e;
}

SequenceState state_from_first_segment(const HybridModel& model, const SegmentEntry& e) {
  const ModelConfig& cfg = model.config();
  SequenceState st = model.new_state();
  for (int l = 0; l < cfg.num_layers; ++l) {
    if (cfg.layer_kinds[l] == LayerKind::LinearAttention) {
      st.layers[l].lin.S = e.linear[l].full;
      st.layers[l].lin.conv_tail = e.linear[l].conv_tail;
    } else {
      st.layers[l].attn.k = e.attention[l].k;
      st.layers[l].attn.v = e.attention[l].v;
      st.layers[l].attn.pos.resize(e.size());
      std::iota(st.layers[l].attn.pos.begin(), st.layers[l].attn.pos.end(), 0);
    }
  }
  st.length = e.size();
  return st;
}

}  // namespace hypic
