#include "runtime/hybrid_model.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <numeric>

#include "kernels/activation.h"
#include "kernels/attention.h"
#include "kernels/conv1d.h"
#include "kernels/delta_rule.h"
#include "kernels/gemm.h"
#include "kernels/norm.h"
#include "kernels/rope.h"
#include "runtime/error.h"

namespace hypic {
namespace fs = std::filesystem;
using cpu::linear;

namespace {
inline void apply(const Linear& l, const float* x, int64_t T, float* y, bool acc = false) {
  linear(x, T, l.in, l.data, l.dtype, l.out, y, acc);
}
}  // namespace

std::unique_ptr<HybridModel> HybridModel::load(const std::string& dir) {
  if (!fs::is_directory(dir)) throw IoError("model directory '" + dir + "' does not exist");
  ModelConfig cfg = ModelConfig::load((fs::path(dir) / "config.json").string());
  ModelWeights w = ModelWeights::load(cfg, dir);
  return std::unique_ptr<HybridModel>(new HybridModel(std::move(cfg), std::move(w)));
}

void HybridModel::embed(std::span<const int> ids, float* h) const {
  const int64_t D = cfg_.hidden_size;
  const size_t esz = dtype_size(w_.embed.dtype);
  for (size_t t = 0; t < ids.size(); ++t) {
    const int id = ids[t];
    if (id < 0 || id >= cfg_.vocab_size)
      throw InvalidArgument("token id " + std::to_string(id) + " at index " + std::to_string(t) +
                            " is outside the vocabulary [0, " + std::to_string(cfg_.vocab_size) + ")");
    convert_to_f32(static_cast<const char*>(w_.embed.data) + static_cast<size_t>(id) * D * esz, w_.embed.dtype, D,
                   h + t * D);
  }
}

void HybridModel::input_norm(int layer, const float* h, int64_t T, float* x) const {
  cpu::rmsnorm(h, x, T, cfg_.hidden_size, w_.layers[layer].input_norm.data(), cfg_.rms_norm_eps, true);
}

void HybridModel::post_norm(int layer, const float* h, int64_t T, float* x) const {
  cpu::rmsnorm(h, x, T, cfg_.hidden_size, w_.layers[layer].post_norm.data(), cfg_.rms_norm_eps, true);
}

void HybridModel::linear_mixer(int layer, const float* x, int64_t T, LinearLayerState& st, float* out,
                               float* transfer) const {
  const GatedDeltaNetWeights& g = w_.layers[layer].lin;
  const int64_t Hk = cfg_.lin_k_heads, Hv = cfg_.lin_v_heads, dk = cfg_.lin_k_dim, dv = cfg_.lin_v_dim;
  const int64_t r = Hv / Hk, key_dim = cfg_.lin_key_dim(), value_dim = cfg_.lin_value_dim(), C = cfg_.lin_conv_dim();
  std::vector<float> qkv(T * C), conv(T * C), z(T * value_dim), b(T * Hv), a(T * Hv);
  apply(g.in_qkv, x, T, qkv.data());
  apply(g.in_z, x, T, z.data());
  apply(g.in_b, x, T, b.data());
  apply(g.in_a, x, T, a.data());
  cpu::causal_conv1d_silu(qkv.data(), T, C, g.conv_w.data(), cfg_.conv_kernel, st.conv_tail.data(), conv.data());

  // Split q | k | v, l2-normalise q and k per key head, expand to the value heads.
  std::vector<float> q(T * Hv * dk), k(T * Hv * dk), v(T * Hv * dv), gate(T * Hv), beta(T * Hv);
  const float qscale = 1.0f / std::sqrt(static_cast<float>(dk));
  std::vector<float> qh(dk), kh(dk);
  for (int64_t t = 0; t < T; ++t) {
    const float* row = conv.data() + t * C;
    for (int64_t hk = 0; hk < Hk; ++hk) {
      std::copy_n(row + hk * dk, dk, qh.data());
      std::copy_n(row + key_dim + hk * dk, dk, kh.data());
      cpu::l2norm_rows(qh.data(), 1, dk, 1e-6f, 1.0f);
      cpu::l2norm_rows(kh.data(), 1, dk, 1e-6f);
      for (int64_t j = hk * r; j < (hk + 1) * r; ++j) {
        for (int64_t i = 0; i < dk; ++i) q[(t * Hv + j) * dk + i] = qh[i] * qscale;
        std::copy_n(kh.data(), dk, &k[(t * Hv + j) * dk]);
      }
    }
    std::copy_n(row + 2 * key_dim, value_dim, &v[t * Hv * dv]);
    for (int64_t j = 0; j < Hv; ++j) {
      beta[t * Hv + j] = cpu::sigmoid(b[t * Hv + j]);
      gate[t * Hv + j] = -std::exp(g.A_log[j]) * cpu::softplus(a[t * Hv + j] + g.dt_bias[j]);
    }
  }
  std::vector<float> o(T * Hv * dv);
  const cpu::DeltaRuleShape shape{T, Hv, dk, dv};
  if (T >= 16) cpu::delta_rule_chunked(shape, q.data(), k.data(), v.data(), gate.data(), beta.data(), st.S.data(), o.data());
  else cpu::delta_rule_recurrent(shape, q.data(), k.data(), v.data(), gate.data(), beta.data(), st.S.data(), o.data());
  if (transfer) cpu::delta_rule_transfer(T, Hv, dk, k.data(), gate.data(), beta.data(), transfer);
  cpu::rmsnorm_gated_silu(o.data(), z.data(), o.data(), T * Hv, dv, g.norm_w.data(), cfg_.rms_norm_eps);
  apply(g.out, o.data(), T, out);
}

void HybridModel::attention_mixer(int layer, const float* x, int64_t T, const int64_t* pos, AttentionLayerState& kv,
                                  float* out) const {
  const AttentionWeights& A = w_.layers[layer].attn;
  const int64_t H = cfg_.num_heads, Hkv = cfg_.num_kv_heads, hd = cfg_.head_dim;
  const bool gated = cfg_.attn_output_gate;
  std::vector<float> qg(T * A.q.out), q(T * H * hd), gate(gated ? T * H * hd : 0);
  apply(A.q, x, T, qg.data());
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < H; ++h) {
      const float* src = qg.data() + (t * H + h) * hd * (gated ? 2 : 1);
      std::copy_n(src, hd, &q[(t * H + h) * hd]);
      if (gated) std::copy_n(src + hd, hd, &gate[(t * H + h) * hd]);
    }
  const int64_t r0 = kv.rows();
  kv.k.resize((r0 + T) * Hkv * hd);
  kv.v.resize((r0 + T) * Hkv * hd);
  float* kn = kv.k.data() + r0 * Hkv * hd;
  apply(A.k, x, T, kn);
  apply(A.v, x, T, kv.v.data() + r0 * Hkv * hd);
  kv.pos.insert(kv.pos.end(), pos, pos + T);
  cpu::rmsnorm(q.data(), q.data(), T * H, hd, A.q_norm.data(), cfg_.rms_norm_eps, true);
  cpu::rmsnorm(kn, kn, T * Hkv, hd, A.k_norm.data(), cfg_.rms_norm_eps, true);
  cpu::rope_apply(q.data(), T, H, hd, cfg_.rotary_dim, pos, cfg_.rope_theta);
  cpu::rope_apply(kn, T, Hkv, hd, cfg_.rotary_dim, pos, cfg_.rope_theta);

  std::vector<float> att(T * H * hd);
  const cpu::AttentionShape s{T, kv.rows(), H, Hkv, hd, hd};
  cpu::attention(s, q.data(), kv.k.data(), kv.v.data(), pos, kv.pos.data(), 1.0f / std::sqrt(static_cast<float>(hd)),
                 att.data());
  if (gated)
    for (size_t i = 0; i < att.size(); ++i) att[i] *= cpu::sigmoid(gate[i]);
  apply(A.o, att.data(), T, out);
}

void HybridModel::mlp(const MlpWeights& m, int64_t I, const float* x, int64_t T, float* out, bool accumulate) const {
  std::vector<float> g(T * I), u(T * I);
  apply(m.gate, x, T, g.data());
  apply(m.up, x, T, u.data());
  cpu::swiglu_inplace(g.data(), u.data(), T * I);
  apply(m.down, g.data(), T, out, accumulate);
}

void HybridModel::ffn(int layer, const float* x, int64_t T, float* out) const {
  const LayerWeights& L = w_.layers[layer];
  const int64_t D = cfg_.hidden_size;
  if (!L.moe) {
    mlp(L.mlp, cfg_.intermediate_size, x, T, out, false);
    return;
  }
  const MoeWeights& M = L.moe_w;
  const int64_t E = cfg_.num_experts, K = cfg_.experts_per_tok;
  std::vector<float> probs(T * E);
  apply(M.router, x, T, probs.data());
  cpu::softmax_rows(probs.data(), T, E);
  // Route: token -> top-k experts, then group rows by expert so each expert runs one matrix product.
  std::vector<std::vector<std::pair<int64_t, float>>> by_expert(E);
  std::vector<int> order(E);
  for (int64_t t = 0; t < T; ++t) {
    const float* p = probs.data() + t * E;
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + K, order.end(),
                      [&](int a, int b) { return p[a] > p[b] || (p[a] == p[b] && a < b); });
    float sum = 0;
    for (int64_t j = 0; j < K; ++j) sum += p[order[j]];
    for (int64_t j = 0; j < K; ++j)
      by_expert[order[j]].push_back({t, cfg_.norm_topk_prob ? p[order[j]] / sum : p[order[j]]});
  }
  std::fill(out, out + T * D, 0.0f);
  const int64_t I = cfg_.moe_intermediate_size;
  std::vector<float> xs, ys;
  for (int64_t e = 0; e < E; ++e) {
    const auto& rows = by_expert[e];
    if (rows.empty()) continue;
    const int64_t n = static_cast<int64_t>(rows.size());
    xs.resize(n * D);
    ys.resize(n * D);
    for (int64_t i = 0; i < n; ++i) std::copy_n(x + rows[i].first * D, D, &xs[i * D]);
    mlp(M.experts[e], I, xs.data(), n, ys.data(), false);
    for (int64_t i = 0; i < n; ++i) {
      float* o = out + rows[i].first * D;
      const float w = rows[i].second;
      for (int64_t d = 0; d < D; ++d) o[d] += w * ys[i * D + d];
    }
  }
  if (M.has_shared) {
    std::vector<float> sh(T * D), sg(T);
    mlp(M.shared, cfg_.shared_expert_intermediate_size, x, T, sh.data(), false);
    apply(M.shared_gate, x, T, sg.data());
    for (int64_t t = 0; t < T; ++t) {
      const float s = cpu::sigmoid(sg[t]);
      for (int64_t d = 0; d < D; ++d) out[t * D + d] += s * sh[t * D + d];
    }
  }
}

void HybridModel::logits(const float* h, int64_t T, float* out) const {
  std::vector<float> x(T * cfg_.hidden_size);
  cpu::rmsnorm(h, x.data(), T, cfg_.hidden_size, w_.final_norm.data(), cfg_.rms_norm_eps, true);
  apply(w_.lm_head, x.data(), T, out);
}

std::vector<float> HybridModel::forward(std::span<const int> ids, SequenceState& st, bool all_logits) const {
  const int64_t T = static_cast<int64_t>(ids.size()), D = cfg_.hidden_size, V = cfg_.vocab_size;
  if (T == 0) throw InvalidArgument("forward: no tokens to run");
  HYPIC_ASSERT(static_cast<int64_t>(st.layers.size()) == cfg_.num_layers, "state of another model");
  cfg_.check_length(st.length + T);
  std::vector<float> h(T * D), x(T * D), y(T * D);
  embed(ids, h.data());
  std::vector<int64_t> pos(T);
  std::iota(pos.begin(), pos.end(), st.length);
  for (int l = 0; l < cfg_.num_layers; ++l) {
    input_norm(l, h.data(), T, x.data());
    if (cfg_.layer_kinds[l] == LayerKind::LinearAttention) linear_mixer(l, x.data(), T, st.layers[l].lin, y.data());
    else attention_mixer(l, x.data(), T, pos.data(), st.layers[l].attn, y.data());
    for (int64_t i = 0; i < T * D; ++i) h[i] += y[i];
    post_norm(l, h.data(), T, x.data());
    ffn(l, x.data(), T, y.data());
    for (int64_t i = 0; i < T * D; ++i) h[i] += y[i];
  }
  st.length += T;
  if (all_logits) {
    std::vector<float> out(T * V);
    logits(h.data(), T, out.data());
    return out;
  }
  std::vector<float> out(V);
  logits(h.data() + (T - 1) * D, 1, out.data());
  return out;
}

}  // namespace hypic
