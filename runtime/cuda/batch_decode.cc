// CudaModel::decode_batch: one-token steps of N sequences (continuous batching) as one pass whose
// per-sequence work (the conv and delta-rule step of the linear layers, the K/V append and attention of
// the full-attention layers) reads each sequence's own buffers through device pointer arrays, so the
// launch count is that of a single sequence's step whatever N is. The pass reads every per-step input
// from device buffers, so it is captured once per (N, key-count bound) as a CUDA graph and replayed while
// the set of sequences changes between steps.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>

#include "kernels/cuda/activation.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/conv1d.h"
#include "kernels/cuda/delta_rule.h"
#include "kernels/cuda/kv_cache.h"
#include "kernels/cuda/model_glue.h"
#include "kernels/cuda/norm.h"
#include "kernels/cuda/sampling.h"
#include "runtime/cuda/batch_step.h"
#include "runtime/cuda/cuda_model.h"
#include "runtime/error.h"

namespace hypic {
using cuda::bf16;
using cuda::DeviceBuffer;

namespace {
// Batched steps kept (buffers and graph per batch size and key bound), least recently used dropped.
constexpr size_t kBatchGraphs = 8;
// Key-count bounds are powers of two from this: a graph serves every step whose longest cache fits.
constexpr int64_t kMinKeyBound = 256;

int64_t key_bound(int64_t keys) {
  int64_t b = kMinKeyBound;
  while (b < keys) b *= 2;
  return b;
}
}  // namespace

void CudaModel::set_batch_decode(bool on) {
  batch_on_ = on;
  if (!on) batch_steps_.clear();
}

std::unique_ptr<CudaModel::BatchStep> CudaModel::make_batch_step(int64_t N, int64_t bound) {
  auto b = std::make_unique<BatchStep>();
  b->N = N;
  b->bound = bound;
  for (int64_t l = 0; l < cfg_.num_layers; ++l)
    (cfg_.layer_kinds[l] == LayerKind::FullAttention ? b->attn_layers : b->lin_layers) += 1;
  b->a = activations(N);
  auto align = [](size_t x) { return (x + 15) & ~size_t{15}; };
  size_t at = align(sizeof(int32_t) * (N + 1));
  b->o_slots = at;
  at = align(at + sizeof(cuda::KvSlot) * N * b->attn_layers);
  b->o_states = at;
  at = align(at + sizeof(float*) * N * b->lin_layers);
  b->o_tails = at;
  at = align(at + sizeof(bf16*) * N * b->lin_layers);
  b->args_bytes = at;
  b->args = DeviceBuffer(pool_, at);
  b->o_ids = at;
  b->o_pos = align(at + sizeof(int32_t) * N);
  b->o_draws = align(b->o_pos + sizeof(int64_t) * N);
  b->o_sampled = align(b->o_draws + sizeof(cuda::RowDraw) * N);
  HYPIC_CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&b->host), b->o_sampled + sizeof(int32_t) * N));
  b->draws = DeviceBuffer(pool_, sizeof(cuda::RowDraw) * N);
  b->sampled = DeviceBuffer(pool_, sizeof(int32_t) * N);
  if (b->attn_layers > 0)
    b->att_ws = DeviceBuffer(pool_, cuda::attention_decode_workspace_bytes(
                                        {N, bound, cfg_.num_heads, cfg_.num_kv_heads, cfg_.head_dim}));
  b->logits = DeviceBuffer(pool_, sizeof(float) * N * cfg_.vocab_size);
  return b;
}

std::map<std::string, double> CudaModel::decode_profile(bool reset) {
  std::map<std::string, double> out;
  if (profile_) {
    out = profile_->ms;
    if (reset) profile_->ms.clear();
  }
  return out;
}

// Enqueues the step on the stream, reading its inputs from b's buffers only (so it can be captured).
void CudaModel::record_batch_step(BatchStep& b, StepProfile* prof) {
  const int64_t N = b.N, D = cfg_.hidden_size;
  cudaStream_t cs = stream_;
  CudaActivations& a = b.a;
  auto mark = [&](const char* part) {
    if (prof) prof->mark(part, cs);
  };
  active_profile_ = prof;
  mark("start");
  cuda::embed_rows(w_.embed.w, a.ids.as<int32_t>(), N, D, a.hp(), cs);
  int64_t li = 0, ai = 0;
  for (int l = 0; l < cfg_.num_layers; ++l) {
    input_norm(l, a);
    mark("norms");
    if (cfg_.layer_kinds[l] == LayerKind::LinearAttention) {
      const int64_t Hk = cfg_.lin_k_heads, Hv = cfg_.lin_v_heads, dk = cfg_.lin_k_dim, dv = cfg_.lin_v_dim;
      const int64_t C = cfg_.lin_conv_dim();
      linear_project(l, a);
      mark("gdn_projections");
      // Each sequence's conv continues (and updates in place) its own tail.
      const float q_scale = 1.0f / std::sqrt(static_cast<float>(dk));
      if (a.arrivals.get()) {
        // conv, split and the recurrent step in one launch
        cuda::gdn_conv_recurrent_rows(a.qkv.as<bf16>(), N, Hk, dk, Hv, dv, w_.layers[l].lin.conv_w, cfg_.conv_kernel,
                                      nullptr, b.tails(li), q_scale, 1e-6f, a.g.as<float>(), a.beta.as<float>(),
                                      nullptr, b.states(li), a.o.as<bf16>(), a.arrivals.as<int32_t>(), cs);
      } else {
        if (fusion_on_ && dk <= 1024) {  // conv and split in one launch
          cuda::gdn_conv_split_rows(a.qkv.as<bf16>(), N, Hk, dk, Hv, dv, w_.layers[l].lin.conv_w, cfg_.conv_kernel,
                                    nullptr, b.tails(li), q_scale, 1e-6f, a.q.as<bf16>(), a.k.as<bf16>(),
                                    a.v.as<bf16>(), cs);
        } else {
          cuda::causal_conv1d_silu_varlen(a.qkv.as<bf16>(), b.cu(), N, N, C, w_.layers[l].lin.conv_w,
                                          cfg_.conv_kernel, b.tails(li), b.tails(li), a.conv.as<bf16>(), cs);
          cuda::gdn_split_qkv(a.conv.as<bf16>(), N, Hk, dk, Hv, dv, q_scale, 1e-6f, a.q.as<bf16>(), a.k.as<bf16>(),
                              a.v.as<bf16>(), cs);
        }
        cuda::gdn_recurrent({1, N, Hv, Hk, dk, dv}, a.q.as<bf16>(), a.k.as<bf16>(), a.v.as<bf16>(), a.g.as<float>(),
                            a.beta.as<float>(), nullptr, a.o.as<bf16>(), cs, b.states(li));
      }
      mark("gdn_conv_recurrence");
      linear_output(l, a);
      mark("gdn_output");
      ++li;
    } else {
      const int64_t H = cfg_.num_heads, Hkv = cfg_.num_kv_heads, hd = cfg_.head_dim;
      // The keys and values go straight into the caches where the norm/rotation kernel takes them.
      const cuda::QkAppend app{a.vn.as<bf16>(), b.slots(ai)};
      cuda::DecodeNewRows fold;  // filled where the attention norms, rotates and appends the new rows itself
      const bool appended = attention_project(l, a, &app, &fold);
      mark("attention_projections");
      if (!appended) cuda::kv_append_batched(a.kn.as<bf16>(), a.vn.as<bf16>(), a.posp(), N, Hkv * hd, b.slots(ai), cs);
      const bf16* q = cfg_.attn_output_gate ? a.aq.as<bf16>() : a.qg.as<bf16>();
      const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
      if (fold.q_src)
        cuda::attention_decode_batched({N, b.bound, H, Hkv, hd}, fold, b.slots(ai), a.posp(), scale,
                                       a.att.as<bf16>(), b.att_ws.get(), cs);
      else
        cuda::attention_decode_batched({N, b.bound, H, Hkv, hd}, q, b.slots(ai), a.posp(), scale, a.att.as<bf16>(),
                                       b.att_ws.get(), cs);
      mark("attention");
      attention_output(l, a);
      mark("attention_output");
      ++ai;
    }
    post_norm(l, a);
    mark("norms");
    ffn(l, a);
    mark("ffn_shared");
  }
  final_logits(a, b.logits.as<float>());
  mark("lm_head");
  active_profile_ = nullptr;
}

CudaModel::BatchStep* CudaModel::enqueue_batch_step(std::span<const int> ids,
                                                    std::span<CudaSequenceState* const> states) {
  if (!batch_on_ || !qwen_layers()) return nullptr;  // the other families: a lane per sequence
  const int64_t N = static_cast<int64_t>(states.size()), V = cfg_.vocab_size;
  const int64_t row = cfg_.num_kv_heads * cfg_.head_dim;
  HYPIC_ASSERT(static_cast<int64_t>(ids.size()) == N && N > 0, "decode_batch: one token per sequence");
  if (N > 65535) return nullptr;
  for (int64_t i = 0; i < N; ++i)
    if (ids[i] < 0 || ids[i] >= V)
      throw InvalidArgument("token id " + std::to_string(ids[i]) + " of sequence " + std::to_string(i) +
                            " is outside the vocabulary [0, " + std::to_string(V) + ")");
  // Every attention layer of a sequence must hold the same rows (a stitched state always does); a state
  // where they differ takes the engine's lane path.
  std::vector<int64_t> rows(N, 0);
  for (int64_t i = 0; i < N; ++i) {
    int64_t r = -1;
    for (int l = 0; l < cfg_.num_layers; ++l) {
      if (cfg_.layer_kinds[l] != LayerKind::FullAttention) continue;
      if (r >= 0 && states[i]->attn[l].rows != r) return nullptr;
      r = states[i]->attn[l].rows;
    }
    rows[i] = std::max<int64_t>(r, 0);
    if (rows[i] + 1 > INT32_MAX) return nullptr;
  }
  cudaStream_t cs = stream_;
  int64_t most = 1;
  for (int64_t i = 0; i < N; ++i) {
    for (int l = 0; l < cfg_.num_layers; ++l)
      if (cfg_.layer_kinds[l] == LayerKind::FullAttention) {
        states[i]->attn[l].reserve(rows[i] + 1, row, cs);
        if (states[i]->attn[l].capacity > INT32_MAX) return nullptr;
      }
    most = std::max(most, rows[i] + 1);
  }
  bool any_moe = false;
  for (int64_t l = 0; l < cfg_.num_layers; ++l) any_moe = any_moe || cfg_.layer_is_moe[l];
  // The grouped-GEMM MoE synchronises with the host (its group sizes): only the device-side MoE paths
  // (few-row, expert-major, or tiled_moe_first's) are captured.
  const bool graph = graphs_on_ && (!any_moe || small_moe(N) || grouped_moe_on_device(N) || tiled_moe_first(N));
  const int64_t bound = key_bound(most);

  // The buffers of a (N, bound) step are kept and reused whether or not it is captured.
  auto hit = std::find_if(batch_steps_.begin(), batch_steps_.end(),
                          [&](const auto& s) { return s->N == N && s->bound == bound; });
  if (hit != batch_steps_.end()) {
    std::rotate(hit, hit + 1, batch_steps_.end());  // most recently used last
  } else {
    if (batch_steps_.size() >= kBatchGraphs) batch_steps_.erase(batch_steps_.begin());
    batch_steps_.push_back(make_batch_step(N, bound));
  }
  BatchStep* b = batch_steps_.back().get();

  // The step's inputs: written into the pinned image, uploaded in three copies.
  char* h = b->host;
  int32_t* cu = reinterpret_cast<int32_t*>(h);
  for (int64_t i = 0; i <= N; ++i) cu[i] = static_cast<int32_t>(i);
  auto* slots = reinterpret_cast<cuda::KvSlot*>(h + b->o_slots);
  auto* sptr = reinterpret_cast<float**>(h + b->o_states);
  auto* tptr = reinterpret_cast<bf16**>(h + b->o_tails);
  int64_t li = 0, ai = 0;
  for (int l = 0; l < cfg_.num_layers; ++l) {
    for (int64_t i = 0; i < N; ++i) {
      CudaSequenceState& st = *states[i];
      if (cfg_.layer_kinds[l] == LayerKind::FullAttention) {
        CudaAttentionLayerState& kv = st.attn[l];
        slots[ai * N + i] = {static_cast<bf16*>(kv.k.get()), static_cast<bf16*>(kv.v.get()),
                             static_cast<int64_t*>(kv.pos.get()), static_cast<int32_t>(rows[i] + 1),
                             static_cast<int32_t>(kv.capacity)};
      } else {
        sptr[li * N + i] = static_cast<float*>(st.lin[l].S.get());
        tptr[li * N + i] = static_cast<bf16*>(st.lin[l].conv_tail.get());
      }
    }
    (cfg_.layer_kinds[l] == LayerKind::FullAttention ? ai : li) += 1;
  }
  auto* hid = reinterpret_cast<int32_t*>(h + b->o_ids);
  auto* hpos = reinterpret_cast<int64_t*>(h + b->o_pos);
  for (int64_t i = 0; i < N; ++i) {
    hid[i] = ids[i];
    hpos[i] = states[i]->length;
  }
  HYPIC_CUDA_CHECK(cudaMemcpyAsync(b->args.get(), h, b->args_bytes, cudaMemcpyHostToDevice, cs));
  HYPIC_CUDA_CHECK(cudaMemcpyAsync(b->a.ids.get(), hid, sizeof(int32_t) * N, cudaMemcpyHostToDevice, cs));
  HYPIC_CUDA_CHECK(cudaMemcpyAsync(b->a.pos.get(), hpos, sizeof(int64_t) * N, cudaMemcpyHostToDevice, cs));

  if (graph && !b->exec) {
    cudaGraph_t g = nullptr;
    try {
      HYPIC_CUDA_CHECK(cudaStreamBeginCapture(cs, cudaStreamCaptureModeThreadLocal));
      try {
        record_batch_step(*b, nullptr);
      } catch (...) {
        cudaStreamEndCapture(cs, &g);
        if (g) cudaGraphDestroy(g);
        throw;
      }
      HYPIC_CUDA_CHECK(cudaStreamEndCapture(cs, &g));
      const cudaError_t err = cudaGraphInstantiate(&b->exec, g, 0);
      cudaGraphDestroy(g);
      HYPIC_CUDA_CHECK(err);
      ++batch_captures_;
    } catch (const std::exception& e) {
      // Nothing captured has run: the step is launched instead, and graphs stay off for this model.
      (void)cudaGetLastError();
      std::fprintf(stderr, "hypic: CUDA graph capture of the batched decode step failed (%s); launching kernels\n",
                   e.what());
      set_decode_graphs(false);
      batch_steps_.clear();
      return enqueue_batch_step(ids, states);
    }
  }
  StepProfile* prof = nullptr;
  if (!b->exec) {
    static const bool profile = [] {
      const char* e = std::getenv("HYPIC_PROFILE_DECODE");
      return e && std::strcmp(e, "1") == 0;
    }();
    if (profile && !profile_) profile_ = std::make_unique<StepProfile>();
    prof = profile_.get();
  }
  if (b->exec) HYPIC_CUDA_CHECK(cudaGraphLaunch(b->exec, cs));
  else record_batch_step(*b, prof);
  b->rows.assign(rows.begin(), rows.end());
  return b;
}

// After the step's results were copied and the stream synchronised: the caches hold one more row.
void CudaModel::finish_batch_step(BatchStep& b, std::span<CudaSequenceState* const> states) {
  if (profile_ && !b.exec) profile_->collect();
  for (size_t i = 0; i < states.size(); ++i)
    for (int l = 0; l < cfg_.num_layers; ++l)
      if (cfg_.layer_kinds[l] == LayerKind::FullAttention) states[i]->attn[l].rows = b.rows[i] + 1;
}

std::vector<float> CudaModel::decode_batch(std::span<const int> ids, std::span<CudaSequenceState* const> states) {
  BatchStep* b = enqueue_batch_step(ids, states);
  if (!b) return {};
  std::vector<float> out(static_cast<size_t>(b->N * cfg_.vocab_size));
  HYPIC_CUDA_CHECK(
      cudaMemcpyAsync(out.data(), b->logits.get(), sizeof(float) * out.size(), cudaMemcpyDeviceToHost, stream_));
  HYPIC_CUDA_CHECK(cudaStreamSynchronize(stream_));
  finish_batch_step(*b, states);
  return out;
}

bool CudaModel::decode_batch_drawn(std::span<const int> ids, std::span<CudaSequenceState* const> states,
                                   std::span<const cuda::RowDraw> draws, std::span<int> sampled,
                                   std::vector<std::vector<float>>& logits) {
  BatchStep* b = enqueue_batch_step(ids, states);
  if (!b) return false;
  const int64_t N = b->N, V = cfg_.vocab_size;
  cudaStream_t cs = stream_;
  // The draws after the step (outside its graph): each drawn row picks its token where the logits are,
  // and only the rows without a draw come back whole.
  auto* hd = reinterpret_cast<cuda::RowDraw*>(b->host + b->o_draws);
  auto* hs = reinterpret_cast<int32_t*>(b->host + b->o_sampled);
  std::copy(draws.begin(), draws.end(), hd);
  HYPIC_CUDA_CHECK(cudaMemcpyAsync(b->draws.get(), hd, sizeof(cuda::RowDraw) * N, cudaMemcpyHostToDevice, cs));
  cuda::draw_rows(b->logits.as<float>(), N, V, b->draws.as<cuda::RowDraw>(), b->sampled.as<int32_t>(), cs);
  HYPIC_CUDA_CHECK(cudaMemcpyAsync(hs, b->sampled.get(), sizeof(int32_t) * N, cudaMemcpyDeviceToHost, cs));
  for (int64_t i = 0; i < N; ++i) {
    if (draws[i].active) continue;
    logits[i].resize(static_cast<size_t>(V));
    HYPIC_CUDA_CHECK(cudaMemcpyAsync(logits[i].data(), b->logits.as<float>() + i * V, sizeof(float) * V,
                                     cudaMemcpyDeviceToHost, cs));
  }
  HYPIC_CUDA_CHECK(cudaStreamSynchronize(cs));
  for (int64_t i = 0; i < N; ++i)
    if (draws[i].active) sampled[i] = hs[i];
  finish_batch_step(*b, states);
  return true;
}

}  // namespace hypic
