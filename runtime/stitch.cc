#include "runtime/stitch.h"

#include "kernels/rope.h"
#include "kernels/transfer_operator.h"
#include "runtime/error.h"

namespace hypic {

StitchResult stitch(const HybridModel& model, SequenceState base,
                    const std::vector<std::shared_ptr<const SegmentEntry>>& segments, std::span<const int> query,
                    Composition mode) {
  const ModelConfig& cfg = model.config();
  const int64_t D = cfg.hidden_size, Hkv = cfg.num_kv_heads, hd = cfg.head_dim;
  if (query.empty()) throw InvalidArgument("stitch: the query tail is empty");

  const StitchRows rows = stitch_rows(base.length, segments, query);
  const std::vector<int>& ids = rows.ids;
  const std::vector<int64_t>&pos = rows.pos, &starts = rows.starts;
  const int64_t A = static_cast<int64_t>(ids.size()), Q = static_cast<int64_t>(query.size());
  cfg.check_length(rows.end);

  const cpu::TransferShape ts{cpu::TransferKind::Dense, cfg.lin_v_heads, cfg.lin_k_dim, cfg.lin_v_dim};
  SequenceState st = std::move(base);
  std::vector<float> h(A * D), x(A * D), y(A * D);
  model.embed(ids, h.data());
  for (int l = 0; l < cfg.num_layers; ++l) {
    model.input_norm(l, h.data(), A, x.data());
    if (cfg.layer_kinds[l] == LayerKind::LinearAttention) {
      LinearLayerState& ls = st.layers[l].lin;
      int64_t row = 0;
      for (auto& s : segments) {
        if (s->seam > 0) model.linear_mixer(l, x.data() + row * D, s->seam, ls, y.data() + row * D);
        row += s->seam;
        if (s->size() == s->seam) continue;  // all seam: the running state is already exact
        const LinearSegmentState& c = s->linear[l];
        if (mode == Composition::Transfer) {
          cpu::transfer_apply(ts, c.transfer.data(), ls.S.data(), c.body.data(), ls.S.data());
        } else {
          for (size_t i = 0; i < ls.S.size(); ++i) ls.S[i] += c.body[i];
        }
        ls.conv_tail = c.conv_tail;
      }
      model.linear_mixer(l, x.data() + row * D, Q, ls, y.data() + row * D);
    } else {
      AttentionLayerState& kv = st.layers[l].attn;
      for (size_t i = 0; i < segments.size(); ++i) {
        const SegmentEntry& s = *segments[i];
        const int64_t body = s.size() - s.seam, row_sz = Hkv * hd;
        if (body == 0) continue;
        const size_t r0 = kv.k.size();
        kv.k.insert(kv.k.end(), s.attention[l].k.begin() + s.seam * row_sz, s.attention[l].k.end());
        kv.v.insert(kv.v.end(), s.attention[l].v.begin() + s.seam * row_sz, s.attention[l].v.end());
        cpu::rope_shift(kv.k.data() + r0, body, Hkv, hd, cfg.rotary_dim, starts[i], cfg.rope_theta);
        for (int64_t j = s.seam; j < s.size(); ++j) kv.pos.push_back(starts[i] + j);
      }
      model.attention_mixer(l, x.data(), A, pos.data(), kv, y.data());
    }
    for (int64_t i = 0; i < A * D; ++i) h[i] += y[i];
    model.post_norm(l, h.data(), A, x.data());
    model.ffn(l, x.data(), A, y.data());
    for (int64_t i = 0; i < A * D; ++i) h[i] += y[i];
  }
  StitchResult r;
  r.logits.resize(cfg.vocab_size);
  model.logits(h.data() + (A - 1) * D, 1, r.logits.data());
  st.length = rows.end;
  r.state = std::move(st);
  r.computed_tokens = A;
  return r;
}

}  // namespace hypic
