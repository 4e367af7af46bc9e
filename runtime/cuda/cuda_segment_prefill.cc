#include "runtime/cuda/cuda_segment_prefill.h"

#include <algorithm>
#include <numeric>

#include "kernels/cuda/check.h"
#include "kernels/cuda/engine_state_ops.h"
#include "kernels/cuda/rope.h"
#include "kernels/cuda/transfer_operator.h"
#include "runtime/error.h"

namespace hypic {

CudaSegmentEntry prefill_segment(CudaModel& model, std::span<const int> tokens, int64_t seam_width,
                                 const CudaSequenceState* context) {
  const ModelConfig& cfg = model.config();
  const int64_t n = static_cast<int64_t>(tokens.size());
  if (n == 0) throw InvalidArgument("cannot cache an empty block");
  cfg.check_length((context ? context->length : 0) + n);
  const int64_t w = std::min<int64_t>(std::max<int64_t>(seam_width, 0), n);
  cudaStream_t cs = model.stream();
  CudaSegmentEntry e = CudaSegmentEntry::allocate(cfg, std::vector<int>(tokens.begin(), tokens.end()), w);

  CudaSequenceState st = context ? context->clone(cs) : model.new_state();
  const int64_t start = st.length;
  const int64_t Hv = cfg.lin_v_heads, dk = cfg.lin_k_dim, dv = cfg.lin_v_dim;
  const int64_t Hkv = cfg.num_kv_heads, hd = cfg.head_dim, state_numel = Hv * dk * dv;
  const cuda::TransferShape ts{cuda::TransferKind::Dense, Hv, dk, dv};

  // Per linear layer the pointer triple of `T_body S_seam` (device arrays for the batched apply); the
  // seam state of each layer gets its own slot so that nothing is overwritten before it is read.
  std::vector<int> lin_layers;
  for (int l = 0; l < cfg.num_layers; ++l)
    if (cfg.layer_kinds[l] == LayerKind::LinearAttention) lin_layers.push_back(l);
  const size_t nl = lin_layers.size();
  cuda::DeviceBuffer seam_states, ptrs;
  if (nl) {
    seam_states = cuda::DeviceBuffer(model.pool(), sizeof(float) * state_numel * nl);
    std::vector<const float*> host(3 * nl);
    for (size_t i = 0; i < nl; ++i) {
      host[i] = e.linear[lin_layers[i]].transfer;
      host[nl + i] = seam_states.as<float>() + i * state_numel;
      host[2 * nl + i] = e.linear[lin_layers[i]].body;
    }
    ptrs = cuda::DeviceBuffer(model.pool(), sizeof(float*) * host.size());
    HYPIC_CUDA_CHECK(cudaMemcpyAsync(ptrs.get(), host.data(), sizeof(float*) * host.size(), cudaMemcpyHostToDevice, cs));
  }
  const float* const* dT = ptrs.as<const float* const>();

  CudaActivations a = model.activations(n);
  std::vector<int64_t> pos(static_cast<size_t>(n));
  std::iota(pos.begin(), pos.end(), start);
  model.embed(tokens, pos, a);
  size_t li = 0;
  for (int l = 0; l < cfg.num_layers; ++l) {
    model.input_norm(l, a);
    if (cfg.layer_kinds[l] == LayerKind::LinearAttention) {
      CudaLinearLayerState& ls = st.lin[l];
      const CudaLinearSegment& out = e.linear[l];
      float* seam_state = seam_states.as<float>() + li * state_numel;
      model.linear_project(l, a);
      if (w > 0) model.linear_recur(l, a, 0, w, ls);
      HYPIC_CUDA_CHECK(
          cudaMemcpyAsync(seam_state, ls.S.get(), sizeof(float) * state_numel, cudaMemcpyDeviceToDevice, cs));
      cuda::identity_operators(out.transfer, Hv, dk, cs);
      if (n > w) model.linear_recur(l, a, w, n - w, ls, out.transfer);
      HYPIC_CUDA_CHECK(cudaMemcpyAsync(out.full, ls.S.get(), sizeof(float) * state_numel, cudaMemcpyDeviceToDevice, cs));
      // S(body | 0) = S_full - T_body S_seam: the body's outputs were computed from the true running state,
      // and the zero-start state follows from linearity.
      cuda::transfer_apply_batched(ts, 1, dT + li, dT + nl + li, nullptr, const_cast<float* const*>(dT + 2 * nl + li),
                                   cs);
      cuda::add_scaled(out.body, out.full, -1.0f, out.body, state_numel, cs);
      HYPIC_CUDA_CHECK(cudaMemcpyAsync(out.conv_tail, ls.conv_tail.get(), ls.conv_tail.bytes(),
                                       cudaMemcpyDeviceToDevice, cs));
      model.linear_output(l, a);
      ++li;
    } else {
      CudaAttentionLayerState& kv = st.attn[l];
      const int64_t r0 = kv.rows, row = Hkv * hd;
      model.attention_mixer(l, a, kv);
      const CudaAttentionSegment& out = e.attention[l];
      const size_t bytes = sizeof(cuda::bf16) * n * row;
      HYPIC_CUDA_CHECK(cudaMemcpyAsync(out.k, kv.k.as<cuda::bf16>() + r0 * row, bytes, cudaMemcpyDeviceToDevice, cs));
      HYPIC_CUDA_CHECK(cudaMemcpyAsync(out.v, kv.v.as<cuda::bf16>() + r0 * row, bytes, cudaMemcpyDeviceToDevice, cs));
      if (start != 0) cuda::rope_shift(out.k, n, Hkv, hd, cfg.rotary_dim, -start, cfg.rope_theta, cs);
    }
    model.post_norm(l, a);
    model.ffn(l, a);
  }
  // The working state and scratch are released on return: let the device finish with them first.
  HYPIC_CUDA_CHECK(cudaStreamSynchronize(cs));
  return e;
}

CudaSequenceState state_from_first_segment(CudaModel& model, const CudaSegmentEntry& e) {
  const ModelConfig& cfg = model.config();
  cudaStream_t cs = model.stream();
  CudaSequenceState st = model.new_state();
  const int64_t n = e.size(), row = cfg.num_kv_heads * cfg.head_dim;
  std::vector<int64_t> pos(static_cast<size_t>(n));
  std::iota(pos.begin(), pos.end(), 0);
  for (int l = 0; l < cfg.num_layers; ++l) {
    if (cfg.layer_kinds[l] == LayerKind::LinearAttention) {
      CudaLinearLayerState& ls = st.lin[l];
      HYPIC_CUDA_CHECK(cudaMemcpyAsync(ls.S.get(), e.linear[l].full, ls.S.bytes(), cudaMemcpyDeviceToDevice, cs));
      HYPIC_CUDA_CHECK(cudaMemcpyAsync(ls.conv_tail.get(), e.linear[l].conv_tail, ls.conv_tail.bytes(),
                                       cudaMemcpyDeviceToDevice, cs));
    } else {
      st.attn[l].append(e.attention[l].k, e.attention[l].v, pos.data(), n, row, cs);
    }
  }
  st.length = n;
  return st;
}

}  // namespace hypic
