#include "runtime/cuda/cuda_stitch.h"

#include "kernels/cuda/check.h"
#include "kernels/cuda/engine_state_ops.h"
#include "kernels/cuda/rope.h"
#include "kernels/cuda/transfer_operator.h"
#include "runtime/error.h"

namespace hypic {

CudaStitchResult stitch(CudaModel& model, CudaSequenceState base,
                        const std::vector<std::shared_ptr<const CudaSegmentEntry>>& segments,
                        std::span<const int> query, Composition mode) {
  const ModelConfig& cfg = model.config();
  const int64_t Hkv = cfg.num_kv_heads, hd = cfg.head_dim, row = Hkv * hd;
  const int64_t Hv = cfg.lin_v_heads, dk = cfg.lin_k_dim, dv = cfg.lin_v_dim, state_numel = Hv * dk * dv;
  if (query.empty()) throw InvalidArgument("stitch: the query tail is empty");
  cudaStream_t cs = model.stream();

  // Active rows: seams in segment order, then the query; the cached body rows of all segments, in order,
  // sit at cached_pos.
  const StitchRows rows = stitch_rows(base.length, segments, query);
  const std::vector<int>& ids = rows.ids;
  const std::vector<int64_t>&pos = rows.pos, &starts = rows.starts, &cached_pos = rows.body_pos;
  const int64_t A = static_cast<int64_t>(ids.size()), Q = static_cast<int64_t>(query.size());
  const int64_t cached = static_cast<int64_t>(cached_pos.size());
  cfg.check_length(rows.end);

  CudaSequenceState st = std::move(base);
  // Uploads done once per request: cached positions, and per (linear layer, segment with a body) the
  // pointers of out = T_body S + S_body (out is a scratch state copied back: it may not alias S).
  cuda::DeviceBuffer cached_pos_dev, tmp, ptrs;
  if (cached) {
    cached_pos_dev = cuda::DeviceBuffer(model.pool(), sizeof(int64_t) * cached);
    HYPIC_CUDA_CHECK(cudaMemcpyAsync(cached_pos_dev.get(), cached_pos.data(), sizeof(int64_t) * cached,
                                     cudaMemcpyHostToDevice, cs));
  }
  std::vector<const float*> host;  // groups of 4: T, S0, S_body, out
  if (mode == Composition::Transfer) {
    tmp = cuda::DeviceBuffer(model.pool(), sizeof(float) * state_numel);
    for (int l = 0; l < cfg.num_layers; ++l) {
      if (cfg.layer_kinds[l] != LayerKind::LinearAttention) continue;
      for (auto& s : segments) {
        if (s->size() == s->seam) continue;
        host.insert(host.end(),
                    {s->linear[l].transfer, st.lin[l].S.as<float>(), s->linear[l].body, tmp.as<float>()});
      }
    }
    if (!host.empty()) {
      ptrs = cuda::DeviceBuffer(model.pool(), sizeof(float*) * host.size());
      HYPIC_CUDA_CHECK(
          cudaMemcpyAsync(ptrs.get(), host.data(), sizeof(float*) * host.size(), cudaMemcpyHostToDevice, cs));
    }
  }
  const float* const* dp = ptrs.as<const float* const>();
  const cuda::TransferShape ts{cuda::TransferKind::Dense, Hv, dk, dv};

  CudaActivations a = model.activations(A);
  model.embed(ids, pos, a);
  size_t item = 0;
  for (int l = 0; l < cfg.num_layers; ++l) {
    model.input_norm(l, a);
    if (cfg.layer_kinds[l] == LayerKind::LinearAttention) {
      CudaLinearLayerState& ls = st.lin[l];
      model.linear_project(l, a);
      int64_t r = 0;
      for (auto& s : segments) {
        if (s->seam > 0) model.linear_recur(l, a, r, s->seam, ls);
        r += s->seam;
        if (s->size() == s->seam) continue;  // all seam: the running state is already exact
        const CudaLinearSegment& c = s->linear[l];
        if (mode == Composition::Transfer) {
          const float* const* it = dp + 4 * item++;
          cuda::transfer_apply_batched(ts, 1, it, it + 1, it + 2, const_cast<float* const*>(it + 3), cs);
          HYPIC_CUDA_CHECK(cudaMemcpyAsync(ls.S.get(), tmp.get(), ls.S.bytes(), cudaMemcpyDeviceToDevice, cs));
        } else {
          cuda::add_scaled(ls.S.as<float>(), ls.S.as<float>(), 1.0f, c.body, state_numel, cs);
        }
        HYPIC_CUDA_CHECK(
            cudaMemcpyAsync(ls.conv_tail.get(), c.conv_tail, ls.conv_tail.bytes(), cudaMemcpyDeviceToDevice, cs));
      }
      model.linear_recur(l, a, r, Q, ls);
      model.linear_output(l, a);
    } else {
      CudaAttentionLayerState& kv = st.attn[l];
      kv.reserve(kv.rows + cached + A, row, cs);
      int64_t at = 0;
      for (size_t i = 0; i < segments.size(); ++i) {
        const CudaSegmentEntry& s = *segments[i];
        const int64_t body = s.size() - s.seam;
        if (body == 0) continue;
        const int64_t r0 = kv.rows;
        kv.append(s.attention[l].k + s.seam * row, s.attention[l].v + s.seam * row, cached_pos_dev.as<int64_t>() + at,
                  body, row, cs);
        cuda::rope_shift(kv.k.as<cuda::bf16>() + r0 * row, body, Hkv, hd, cfg.rotary_dim, starts[i], cfg.rope_theta,
                         cs);
        at += body;
      }
      model.attention_mixer(l, a, kv);
    }
    model.post_norm(l, a);
    model.ffn(l, a);
  }
  CudaStitchResult res;
  res.logits = model.logits(a, 1);  // synchronises: the scratch above may be released
  st.length = rows.end;
  res.state = std::move(st);
  res.computed_tokens = A;
  return res;
}

}  // namespace hypic
