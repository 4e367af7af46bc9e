#include "runtime/cpu_backend.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <numeric>

#include "kernels/activation.h"
#include "kernels/attention.h"
#include "kernels/conv1d.h"
#include "kernels/delta_rule.h"
#include "kernels/gemm.h"
#include "kernels/kda.h"
#include "kernels/moe_route.h"
#include "kernels/norm.h"
#include "kernels/rope.h"
#include "kernels/transfer_operator.h"
#include "runtime/error.h"

namespace hypic {
namespace fs = std::filesystem;

namespace {

inline void apply(const Linear& l, const float* x, int64_t T, float* y, bool acc = false) {
  cpu::linear(x, T, l.in, l.data, l.dtype, l.out, y, acc);
}

class HostMemory : public Memory {
 public:
  explicit HostMemory(size_t bytes) : buf_((bytes + sizeof(float) - 1) / sizeof(float)) {
    data_ = buf_.data();
    bytes_ = bytes;
  }

 private:
  std::vector<float> buf_;
};

// Buffers of one pass; only what the model's layer kinds use is sized.
struct CpuRows : Rows {
  std::vector<int64_t> pos;
  std::vector<float> h, x, y;                   // [T, D]: residual stream, normed input, sublayer output
  std::vector<float> qkv, z, g, beta, o;       // Gated DeltaNet / KDA: pre-conv qkv, gate input z, gates, output
  std::vector<float> q, gate, kn, vn, att;     // attention: queries, output gate, new K/V, attention output
};

CpuRows& rows_of(Rows& r) { return static_cast<CpuRows&>(r); }

cpu::TransferShape transfer_shape(const ModelConfig& c) {
  const auto kind = c.linear_kind == LinearKind::Lightning ? cpu::TransferKind::Scalar : cpu::TransferKind::Dense;
  return {kind, c.lin_v_heads, c.lin_k_dim, c.lin_v_dim};
}

}  // namespace

std::unique_ptr<CpuBackend> CpuBackend::load(const std::string& dir) {
  if (!fs::is_directory(dir)) throw IoError("model directory '" + dir + "' does not exist");
  ModelConfig cfg = ModelConfig::load((fs::path(dir) / "config.json").string());
  ModelWeights w = ModelWeights::load(cfg, dir);
  return std::make_unique<CpuBackend>(std::move(cfg), std::move(w));
}

std::unique_ptr<Memory> CpuBackend::allocate(size_t bytes) { return std::make_unique<HostMemory>(bytes); }

std::unique_ptr<State> CpuBackend::new_state() {
  return std::make_unique<SequenceState>(SequenceState::empty_for(cfg_));
}

std::unique_ptr<State> CpuBackend::clone(const State& s) {
  return std::make_unique<SequenceState>(cpu_state(s));
}

void CpuBackend::reset(State& s) {
  SequenceState& st = cpu_state(s);
  for (auto& l : st.layers) {
    std::fill(l.lin.S.begin(), l.lin.S.end(), 0.0f);
    std::fill(l.lin.conv_tail.begin(), l.lin.conv_tail.end(), 0.0f);
    l.attn.k.clear();
    l.attn.v.clear();
    l.attn.pos.clear();
  }
  st.length = 0;
}

std::unique_ptr<Rows> CpuBackend::rows(int64_t T) {
  HYPIC_ASSERT(T > 0, "rows: a pass needs rows");
  auto r = std::make_unique<CpuRows>();
  r->T = T;
  const int64_t D = cfg_.hidden_size;
  r->h.resize(T * D);
  r->x.resize(T * D);
  r->y.resize(T * D);
  return r;
}

void CpuBackend::embed(std::span<const int> ids, std::span<const int64_t> pos, Rows& rr) {
  CpuRows& r = rows_of(rr);
  const int64_t D = cfg_.hidden_size;
  HYPIC_ASSERT(static_cast<int64_t>(ids.size()) == r.T && pos.size() == ids.size(), "embed: rows mismatch");
  const size_t esz = dtype_size(w_.embed.dtype);
  for (size_t t = 0; t < ids.size(); ++t) {
    const int id = ids[t];
    if (id < 0 || id >= cfg_.vocab_size)
      throw InvalidArgument("token id " + std::to_string(id) + " at index " + std::to_string(t) +
                            " is outside the vocabulary [0, " + std::to_string(cfg_.vocab_size) + ")");
    convert_to_f32(static_cast<const char*>(w_.embed.data) + static_cast<size_t>(id) * D * esz, w_.embed.dtype, D,
                   r.h.data() + t * D);
  }
  r.pos.assign(pos.begin(), pos.end());
}

void CpuBackend::input_norm(int layer, Rows& rr) {
  CpuRows& r = rows_of(rr);
  cpu::rmsnorm(r.h.data(), r.x.data(), r.T, cfg_.hidden_size, w_.layers[layer].input_norm.data(), cfg_.rms_norm_eps,
               cfg_.zero_centred_norms);
  if (cfg_.residual_from_norm) {  // MiniMax: the mixer's output is added to alpha * norm(x), not to x
    const float alpha = cfg_.layer_kinds[layer] == LayerKind::LinearAttention ? cfg_.linear_alpha : cfg_.full_alpha;
    for (size_t i = 0; i < r.h.size(); ++i) r.h[i] = alpha * r.x[i];
  }
}

void CpuBackend::post_norm(int layer, Rows& rr) {
  CpuRows& r = rows_of(rr);
  cpu::rmsnorm(r.h.data(), r.x.data(), r.T, cfg_.hidden_size, w_.layers[layer].post_norm.data(), cfg_.rms_norm_eps,
               cfg_.zero_centred_norms);
  if (cfg_.residual_from_norm)
    for (size_t i = 0; i < r.h.size(); ++i) r.h[i] = cfg_.mlp_alpha * r.x[i];
}

void CpuBackend::linear_project(int layer, Rows& rr) {
  if (cfg_.linear_kind == LinearKind::Lightning) return lightning_project(layer, rr);
  if (cfg_.linear_kind == LinearKind::Kda) return kda_project(layer, rr);
  CpuRows& r = rows_of(rr);
  const GatedDeltaNetWeights& g = w_.layers[layer].lin;
  const int64_t T = r.T, Hv = cfg_.lin_v_heads;
  r.qkv.resize(T * cfg_.lin_conv_dim());
  r.z.resize(T * cfg_.lin_value_dim());
  r.g.resize(T * Hv);
  r.beta.resize(T * Hv);
  r.o.resize(T * cfg_.lin_value_dim());
  std::vector<float> a(T * Hv);
  apply(g.in_qkv, r.x.data(), T, r.qkv.data());
  apply(g.in_z, r.x.data(), T, r.z.data());
  apply(g.in_b, r.x.data(), T, r.beta.data());
  apply(g.in_a, r.x.data(), T, a.data());
  for (int64_t t = 0; t < T; ++t)
    for (int64_t j = 0; j < Hv; ++j) {
      r.beta[t * Hv + j] = cpu::sigmoid(r.beta[t * Hv + j]);
      r.g[t * Hv + j] = -std::exp(g.A_log[j]) * cpu::softplus(a[t * Hv + j] + g.dt_bias[j]);
    }
}

void CpuBackend::linear_recur(int layer, Rows& rr, int64_t row0, int64_t T, State& s, float* transfer) {
  CpuRows& r = rows_of(rr);
  HYPIC_ASSERT(row0 >= 0 && T > 0 && row0 + T <= r.T, "linear_recur: rows out of range");
  if (cfg_.linear_kind == LinearKind::Lightning) return lightning_recur(layer, r, row0, T, s, transfer);
  LinearLayerState& st = cpu_state(s).layers[layer].lin;
  const GatedDeltaNetWeights& g = w_.layers[layer].lin;
  const int64_t Hk = cfg_.lin_k_heads, Hv = cfg_.lin_v_heads, dk = cfg_.lin_k_dim, dv = cfg_.lin_v_dim;
  const int64_t rep = Hv / Hk, key_dim = cfg_.lin_key_dim(), value_dim = cfg_.lin_value_dim(), C = cfg_.lin_conv_dim();
  std::vector<float> conv(T * C);
  const float* conv_w = cfg_.linear_kind == LinearKind::Kda ? w_.layers[layer].kda.conv_w.data() : g.conv_w.data();
  cpu::causal_conv1d_silu(r.qkv.data() + row0 * C, T, C, conv_w, cfg_.conv_kernel, st.conv_tail.data(), conv.data());
  // Split q | k | v, l2-normalise q and k per key head, expand to the value heads.
  std::vector<float> q(T * Hv * dk), k(T * Hv * dk), v(T * Hv * dv);
  const float qscale = 1.0f / std::sqrt(static_cast<float>(dk));
  std::vector<float> qh(dk), kh(dk);
  for (int64_t t = 0; t < T; ++t) {
    const float* row = conv.data() + t * C;
    for (int64_t hk = 0; hk < Hk; ++hk) {
      std::copy_n(row + hk * dk, dk, qh.data());
      std::copy_n(row + key_dim + hk * dk, dk, kh.data());
      cpu::l2norm_rows(qh.data(), 1, dk, 1e-6f, 1.0f);
      cpu::l2norm_rows(kh.data(), 1, dk, 1e-6f);
      for (int64_t j = hk * rep; j < (hk + 1) * rep; ++j) {
        for (int64_t i = 0; i < dk; ++i) q[(t * Hv + j) * dk + i] = qh[i] * qscale;
        std::copy_n(kh.data(), dk, &k[(t * Hv + j) * dk]);
      }
    }
    std::copy_n(row + 2 * key_dim, value_dim, &v[t * Hv * dv]);
  }
  const float* gate = r.g.data() + row0 * Hv;
  const float* beta = r.beta.data() + row0 * Hv;
  float* o = r.o.data() + row0 * value_dim;
  const cpu::DeltaRuleShape shape{T, Hv, dk, dv};
  if (cfg_.linear_kind == LinearKind::Kda) {  // the decay per key channel: g is [rows, Hv, dk]
    const float* g_ch = r.g.data() + row0 * Hv * dk;
    cpu::kda_recurrent(shape, q.data(), k.data(), v.data(), g_ch, beta, st.S.data(), o);
    if (transfer) cpu::kda_transfer(T, Hv, dk, k.data(), g_ch, beta, transfer);
    return;
  }
  if (T >= 16) cpu::delta_rule_chunked(shape, q.data(), k.data(), v.data(), gate, beta, st.S.data(), o);
  else cpu::delta_rule_recurrent(shape, q.data(), k.data(), v.data(), gate, beta, st.S.data(), o);
  if (transfer) cpu::delta_rule_transfer(T, Hv, dk, k.data(), gate, beta, transfer);
}

void CpuBackend::set_communicator(std::shared_ptr<Communicator> comm) {
  if (comm && comm->size() > 1 &&
      (cfg_.linear_kind != LinearKind::GatedDeltaNet || cfg_.mla || cfg_.residual_from_norm))
    throw InvalidArgument("tensor parallelism covers the Qwen3-Next / Qwen3.5 layers, not " + cfg_.text_model_type);
  comm_ = std::move(comm);
}

void CpuBackend::reduce_into_residual(Rows& rr, const std::function<void()>& step) {
  CpuRows& r = rows_of(rr);
  std::vector<float>& partial = tp_partial_;  // kept across calls: no allocation per sublayer
  partial.assign(r.h.size(), 0.0f);
  std::swap(r.h, partial);  // the step adds onto zeros
  step();
  std::swap(r.h, partial);
  comm_->all_reduce_sum(partial.data(), partial.size());
  for (size_t i = 0; i < partial.size(); ++i) r.h[i] += partial[i];
}

void CpuBackend::linear_output(int layer, Rows& rr) {
  if (comm_ && comm_->size() > 1) return reduce_into_residual(rr, [&] { linear_output_local(layer, rr); });
  linear_output_local(layer, rr);
}

void CpuBackend::attention_output(int layer, Rows& rr) {
  if (comm_ && comm_->size() > 1) return reduce_into_residual(rr, [&] { attention_output_local(layer, rr); });
  attention_output_local(layer, rr);
}

void CpuBackend::ffn(int layer, Rows& rr) {
  if (comm_ && comm_->size() > 1) return reduce_into_residual(rr, [&] { ffn_local(layer, rr); });
  ffn_local(layer, rr);
}

void CpuBackend::linear_output_local(int layer, Rows& rr) {
  if (cfg_.linear_kind == LinearKind::Lightning) return lightning_output(layer, rr);
  if (cfg_.linear_kind == LinearKind::Kda) return kda_output(layer, rr);
  CpuRows& r = rows_of(rr);
  const GatedDeltaNetWeights& g = w_.layers[layer].lin;
  const int64_t T = r.T, Hv = cfg_.lin_v_heads, dv = cfg_.lin_v_dim;
  cpu::rmsnorm_gated_silu(r.o.data(), r.z.data(), r.o.data(), T * Hv, dv, g.norm_w.data(), cfg_.rms_norm_eps);
  apply(g.out, r.o.data(), T, r.h.data(), /*acc=*/true);
}

// KDA (Kimi): pre-conv q | k | v in r.qkv (the conv and the rest of the recurrence are linear_recur's, shared
// with Gated DeltaNet), the per-channel log decay g = -exp(A_log_h) softplus(f_b(f_a h) + dt_bias) in r.g
// [T, H, dk], beta = sigmoid(b_proj h) in r.beta, the output gate's input g_b(g_a h) in r.z.
void CpuBackend::kda_project(int layer, Rows& rr) {
  CpuRows& r = rows_of(rr);
  const KdaWeights& g = w_.layers[layer].kda;
  const int64_t T = r.T, H = cfg_.lin_v_heads, dk = cfg_.lin_k_dim, W = H * dk, C = cfg_.lin_conv_dim();
  r.qkv.resize(T * C);
  r.z.resize(T * W);
  r.g.resize(T * W);
  r.beta.resize(T * H);
  r.o.resize(T * W);
  const float* x = r.x.data();
  const int64_t D = cfg_.hidden_size;
  cpu::gemm_xwt(x, T, D, D, g.q.data, g.q.dtype, W, r.qkv.data(), C);
  cpu::gemm_xwt(x, T, D, D, g.k.data, g.k.dtype, W, r.qkv.data() + W, C);
  cpu::gemm_xwt(x, T, D, D, g.v.data, g.v.dtype, W, r.qkv.data() + 2 * W, C);
  std::vector<float> low(cfg_.kda_low_rank_gates ? T * dk : 0);
  auto gate_input = [&](const Linear& a, const Linear& b, float* out) {  // b(a x), or b x (full rank)
    if (!cfg_.kda_low_rank_gates) return apply(b, x, T, out);
    apply(a, x, T, low.data());
    apply(b, low.data(), T, out);
  };
  gate_input(g.f_a, g.f_b, r.g.data());
  const float lb = cfg_.kda_gate_lower_bound;
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < H; ++h) {
      const float a = std::exp(g.A_log[h]);
      float* gt = r.g.data() + (t * H + h) * dk;
      for (int64_t i = 0; i < dk; ++i) {
        const float f = gt[i] + g.dt_bias[h * dk + i];
        gt[i] = lb < 0 ? lb * cpu::sigmoid(a * f) : -a * cpu::softplus(f);
      }
    }
  apply(g.b, x, T, r.beta.data());
  for (float& b : r.beta) b = cpu::sigmoid(b);
  gate_input(g.g_a, g.g_b, r.z.data());
}

// KDA's output: per head RMSNorm (weight [dk]) times sigmoid of the output gate, then o_proj.
void CpuBackend::kda_output(int layer, Rows& rr) {
  CpuRows& r = rows_of(rr);
  const KdaWeights& g = w_.layers[layer].kda;
  const int64_t T = r.T, W = cfg_.lin_v_heads * cfg_.lin_k_dim;
  cpu::rmsnorm(r.o.data(), r.o.data(), T * cfg_.lin_v_heads, cfg_.lin_k_dim, g.o_norm.data(), cfg_.rms_norm_eps, false);
  for (int64_t i = 0; i < T * W; ++i) r.o[i] *= cpu::sigmoid(r.z[i]);
  apply(g.out, r.o.data(), T, r.h.data(), /*acc=*/true);
}

// Lightning (Ring): q | k | v with q/k RMSNorm and RoPE at the rows' positions, kept in r.qkv as
// [T, 3, H, hd]; the output gate's input in r.z. No convolution, so everything position-dependent is done
// here and the recurrence only reads these rows.
void CpuBackend::lightning_project(int layer, Rows& rr) {
  CpuRows& r = rows_of(rr);
  const LightningWeights& g = w_.layers[layer].lightning;
  const int64_t T = r.T, H = cfg_.lin_v_heads, hd = cfg_.lin_k_dim, W = H * hd;
  r.qkv.resize(T * 3 * W);
  r.z.resize(T * W);
  r.o.resize(T * W);
  apply(g.qkv, r.x.data(), T, r.qkv.data());
  apply(g.gate, r.x.data(), T, r.z.data());
  if (cfg_.lightning_style == LightningStyle::MiniMax) {  // SiLU on q | k | v, nothing position-dependent
    for (float& v : r.qkv) v = cpu::silu(v);
    return;
  }
  for (int64_t t = 0; t < T; ++t) {
    float* q = r.qkv.data() + t * 3 * W;
    float* k = q + W;
    cpu::rmsnorm(q, q, H, hd, g.q_norm.data(), cfg_.rms_norm_eps, false);
    cpu::rmsnorm(k, k, H, hd, g.k_norm.data(), cfg_.rms_norm_eps, false);
    cpu::rope_apply(q, 1, H, hd, cfg_.rotary_dim, &r.pos[t], cfg_.rope_theta);
    cpu::rope_apply(k, 1, H, hd, cfg_.rotary_dim, &r.pos[t], cfg_.rope_theta);
  }
}

void CpuBackend::lightning_recur(int layer, Rows& rr, int64_t row0, int64_t n, State& s, float* transfer) {
  CpuRows& r = rows_of(rr);
  LinearLayerState& st = cpu_state(s).layers[layer].lin;
  const LightningWeights& g = w_.layers[layer].lightning;
  const int64_t H = cfg_.lin_v_heads, hd = cfg_.lin_k_dim, W = H * hd;
  const float scale = cfg_.lightning_style == LightningStyle::Ring ? 1.0f / std::sqrt(static_cast<float>(hd)) : 1.0f;
  std::vector<float> q(n * W), k(n * W), v(n * W), log_a(n * H);
  for (int64_t t = 0; t < n; ++t) {
    const float* row = r.qkv.data() + (row0 + t) * 3 * W;
    for (int64_t i = 0; i < W; ++i) q[t * W + i] = row[i] * scale;
    std::copy_n(row + W, W, &k[t * W]);
    std::copy_n(row + 2 * W, W, &v[t * W]);
    std::copy_n(g.log_decay.data(), H, &log_a[t * H]);
  }
  const cpu::TransferShape ts = transfer_shape(cfg_);
  cpu::gated_linear_scan(ts, n, q.data(), k.data(), v.data(), log_a.data(), st.S.data(), r.o.data() + row0 * W);
  if (transfer) cpu::gated_linear_transfer(ts, n, log_a.data(), transfer);
}

void CpuBackend::lightning_output(int layer, Rows& rr) {
  CpuRows& r = rows_of(rr);
  const LightningWeights& g = w_.layers[layer].lightning;
  const int64_t T = r.T, W = cfg_.lin_v_heads * cfg_.lin_k_dim, G = cfg_.group_norm_size, gw = W / G;
  for (int64_t t = 0; t < T; ++t)
    for (int64_t j = 0; j < G; ++j) {
      float* o = r.o.data() + t * W + j * gw;
      cpu::rmsnorm(o, o, 1, gw, g.g_norm.data() + j * gw, cfg_.rms_norm_eps, false);
    }
  const float beta = cfg_.residual_from_norm ? cfg_.linear_beta : 1.0f;  // out(beta o) = beta out(o)
  for (int64_t i = 0; i < T * W; ++i) r.o[i] *= beta * cpu::sigmoid(r.z[i]);
  apply(g.out, r.o.data(), T, r.h.data(), /*acc=*/true);
}

void CpuBackend::attention_project(int layer, Rows& rr) {
  if (cfg_.mla) return mla_project(layer, rr);
  CpuRows& r = rows_of(rr);
  const AttentionWeights& A = w_.layers[layer].attn;
  const int64_t T = r.T, H = cfg_.num_heads, Hkv = cfg_.num_kv_heads, hd = cfg_.head_dim;
  const bool gated = cfg_.attn_output_gate;
  std::vector<float> qg(T * A.q.out);
  r.q.resize(T * H * hd);
  r.gate.resize(gated ? T * H * hd : 0);
  r.kn.resize(T * Hkv * hd);
  r.vn.resize(T * Hkv * hd);
  r.att.resize(T * H * hd);
  apply(A.q, r.x.data(), T, qg.data());
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < H; ++h) {
      const float* src = qg.data() + (t * H + h) * hd * (gated ? 2 : 1);
      std::copy_n(src, hd, &r.q[(t * H + h) * hd]);
      if (gated) std::copy_n(src + hd, hd, &r.gate[(t * H + h) * hd]);
    }
  apply(A.k, r.x.data(), T, r.kn.data());
  apply(A.v, r.x.data(), T, r.vn.data());
  if (!A.q_norm.empty()) {  // MiniMax has no q/k norm
    cpu::rmsnorm(r.q.data(), r.q.data(), T * H, hd, A.q_norm.data(), cfg_.rms_norm_eps, cfg_.zero_centred_norms);
    cpu::rmsnorm(r.kn.data(), r.kn.data(), T * Hkv, hd, A.k_norm.data(), cfg_.rms_norm_eps, cfg_.zero_centred_norms);
  }
  cpu::rope_apply(r.q.data(), T, H, hd, cfg_.rotary_dim, r.pos.data(), cfg_.rope_theta);
  cpu::rope_apply(r.kn.data(), T, Hkv, hd, cfg_.rotary_dim, r.pos.data(), cfg_.rope_theta);
}

// MLA (Kimi: no RoPE; Ring-2.5: RoPE on the rope part). The rows keep the rope part FIRST, as the other
// families keep their rotary dims: queries [q_rope | q_nope] and keys [k_rope | k_nope_h] per head (one
// permutation of both leaves their products as they were), the rope part de-interleaved from the checkpoint's
// pairs (x0, x1), (x2, x3), ... to halves, so that NeoX rotate_half over rotary_dim dims is the model's
// interleaved rotation and cached keys re-rotate with the common code. Values [v_h | 0] (zero-padded to the
// key head dim, so the attention state keeps one row width).
void CpuBackend::mla_project(int layer, Rows& rr) {
  CpuRows& r = rows_of(rr);
  const AttentionWeights& A = w_.layers[layer].attn;
  const MlaWeights& M = w_.layers[layer].mla;
  const int64_t T = r.T, H = cfg_.num_heads, hd = cfg_.head_dim, R = cfg_.kv_lora_rank, nope = cfg_.qk_nope_dim,
                rope = cfg_.qk_rope_dim, dv = cfg_.v_head_dim;
  r.q.resize(T * H * hd);
  r.kn.resize(T * H * hd);
  r.vn.assign(T * H * hd, 0.0f);
  r.att.resize(T * H * hd);
  std::vector<float> qp(T * H * hd);
  apply(A.q, r.x.data(), T, qp.data());
  // Pairs (x0, x1), (x2, x3), ... to halves; without RoPE (Kimi, whose rope dim may be odd) kept in order.
  auto deinterleave = [&](const float* src, float* dst) {
    if (cfg_.rotary_dim == 0) return (void)std::copy_n(src, rope, dst);
    for (int64_t i = 0; i < rope / 2; ++i) {
      dst[i] = src[2 * i];
      dst[rope / 2 + i] = src[2 * i + 1];
    }
  };
  auto rope_first = [&](const float* src, float* dst) {  // [nope | rope] -> [rope | nope]
    deinterleave(src + nope, dst);
    std::copy_n(src, nope, dst + rope);
  };
  for (int64_t i = 0; i < T * H; ++i) rope_first(qp.data() + i * hd, r.q.data() + i * hd);
  cpu::rope_apply(r.q.data(), T, H, hd, cfg_.rotary_dim, r.pos.data(), cfg_.rope_theta);
  std::vector<float> lat(T * (R + rope)), c(T * R), kv(T * H * (nope + dv)), kr(T * rope);
  apply(M.kv_a, r.x.data(), T, lat.data());
  for (int64_t t = 0; t < T; ++t) std::copy_n(lat.data() + t * (R + rope), R, c.data() + t * R);
  // kv_a_layernorm is built with the RMSNorm's default eps (1e-6), not rms_norm_eps.
  cpu::rmsnorm(c.data(), c.data(), T, R, M.kv_norm.data(), 1e-6f, false);
  apply(M.kv_b, c.data(), T, kv.data());
  for (int64_t t = 0; t < T; ++t)  // the shared k_rope, de-interleaved and rotated once per token
    deinterleave(lat.data() + t * (R + rope) + R, kr.data() + t * rope);
  cpu::rope_apply(kr.data(), T, 1, rope, cfg_.rotary_dim, r.pos.data(), cfg_.rope_theta);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < H; ++h) {
      const float* src = kv.data() + (t * H + h) * (nope + dv);
      float* k = r.kn.data() + (t * H + h) * hd;
      std::copy_n(kr.data() + t * rope, rope, k);
      std::copy_n(src, nope, k + rope);
      std::copy_n(src + nope, dv, r.vn.data() + (t * H + h) * hd);
    }
  if (cfg_.mla_head_gate) {  // Ring-2.5: sigmoid gate per head on the attention output
    r.gate.resize(T * H);
    apply(M.head_gate, r.x.data(), T, r.gate.data());
  }
}

void CpuBackend::attention_core(int layer, Rows& rr, int64_t row0, int64_t n, State& s) {
  CpuRows& r = rows_of(rr);
  HYPIC_ASSERT(row0 >= 0 && n > 0 && row0 + n <= r.T, "attention_core: rows out of range");
  AttentionLayerState& kv = cpu_state(s).layers[layer].attn;
  const int64_t H = cfg_.num_heads, Hkv = cfg_.num_kv_heads, hd = cfg_.head_dim, row = Hkv * hd;
  kv.k.insert(kv.k.end(), r.kn.begin() + row0 * row, r.kn.begin() + (row0 + n) * row);
  kv.v.insert(kv.v.end(), r.vn.begin() + row0 * row, r.vn.begin() + (row0 + n) * row);
  kv.pos.insert(kv.pos.end(), r.pos.begin() + row0, r.pos.begin() + row0 + n);
  const cpu::AttentionShape shape{n, kv.rows(), H, Hkv, hd, hd};
  cpu::attention(shape, r.q.data() + row0 * H * hd, kv.k.data(), kv.v.data(), r.pos.data() + row0, kv.pos.data(),
                 1.0f / std::sqrt(static_cast<float>(hd)), r.att.data() + row0 * H * hd);
}

void CpuBackend::attention_output_local(int layer, Rows& rr) {
  CpuRows& r = rows_of(rr);
  if (cfg_.attn_output_gate)
    for (size_t i = 0; i < r.att.size(); ++i) r.att[i] *= cpu::sigmoid(r.gate[i]);
  if (cfg_.residual_from_norm)
    for (float& a : r.att) a *= cfg_.full_beta;
  if (cfg_.mla_head_gate)
    for (int64_t i = 0; i < r.T * cfg_.num_heads; ++i) {
      const float s = cpu::sigmoid(r.gate[i]);
      for (int64_t d = 0; d < cfg_.head_dim; ++d) r.att[i * cfg_.head_dim + d] *= s;
    }
  if (cfg_.mla && cfg_.v_head_dim < cfg_.head_dim) {  // drop the padding: rows [H, dv] for o_proj
    const int64_t hd = cfg_.head_dim, dv = cfg_.v_head_dim;
    for (int64_t i = 0; i < r.T * cfg_.num_heads; ++i)
      std::memmove(r.att.data() + i * dv, r.att.data() + i * hd, dv * sizeof(float));
  }
  apply(w_.layers[layer].attn.o, r.att.data(), r.T, r.h.data(), /*acc=*/true);
}

void CpuBackend::mlp(const MlpWeights& m, int64_t I, const float* x, int64_t T, float* out, bool accumulate) const {
  std::vector<float> g(T * I), u(T * I);
  apply(m.gate, x, T, g.data());
  apply(m.up, x, T, u.data());
  cpu::swiglu_inplace(g.data(), u.data(), T * I);
  apply(m.down, g.data(), T, out, accumulate);
}

void CpuBackend::ffn_local(int layer, Rows& rr) {
  CpuRows& r = rows_of(rr);
  const LayerWeights& L = w_.layers[layer];
  const int64_t T = r.T, D = cfg_.hidden_size;
  const float* x = r.x.data();
  float* out = r.h.data();  // every contribution accumulates onto the residual stream
  if (!L.moe) {
    HYPIC_ASSERT(!cfg_.residual_from_norm, "ffn: post-norm residual factors are for MoE layers");
    mlp(L.mlp, cfg_.intermediate_size, x, T, out, true);
    return;
  }
  const MoeWeights& M = L.moe_w;
  const int64_t E = cfg_.num_experts, K = cfg_.experts_per_tok;
  std::vector<float> probs(T * E);
  apply(M.router, x, T, probs.data());
  // Route: token -> top-k experts, then group rows by expert so each expert runs one matrix product.
  std::vector<std::vector<std::pair<int64_t, float>>> by_expert(E);
  if (cfg_.router == RouterKind::SigmoidGroupTopK) {
    route_group_topk(M, probs.data(), T, by_expert);
  } else {
    cpu::softmax_rows(probs.data(), T, E);
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
  }
  // The routed sum is formed apart and added once, as the reference adds it to the residual.
  std::vector<float> y(T * D, 0.0f);
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
      float* o = y.data() + rows[i].first * D;
      const float w = rows[i].second;
      for (int64_t d = 0; d < D; ++d) o[d] += w * ys[i * D + d];
    }
  }
  if (M.has_shared && !cfg_.shared_expert_gate) {
    mlp(M.shared, cfg_.shared_expert_intermediate_size, x, T, y.data(), true);
  } else if (M.has_shared) {
    std::vector<float> sh(T * D), sg(T);
    mlp(M.shared, cfg_.shared_expert_intermediate_size, x, T, sh.data(), false);
    apply(M.shared_gate, x, T, sg.data());
    for (int64_t t = 0; t < T; ++t) {
      const float s = cpu::sigmoid(sg[t]);
      for (int64_t d = 0; d < D; ++d) y[t * D + d] += s * sh[t * D + d];
    }
  }
  const float beta = cfg_.residual_from_norm ? cfg_.mlp_beta : 1.0f;
  for (int64_t i = 0; i < T * D; ++i) out[i] += beta * y[i];
}

// Ring's and Kimi's router (kernels/moe_route.h), as per-expert row lists.
void CpuBackend::route_group_topk(const MoeWeights& M, const float* logits, int64_t T,
                                  std::vector<std::vector<std::pair<int64_t, float>>>& by_expert) const {
  const int64_t K = cfg_.experts_per_tok;
  std::vector<int32_t> ids(T * K);
  std::vector<float> w(T * K);
  const bool renorm = cfg_.norm_topk_prob && (K > 1 || cfg_.router_mask_inf);
  cpu::moe_route_sigmoid_group(logits, M.expert_bias.data(), T, cfg_.num_experts, K, cfg_.n_group, cfg_.topk_group,
                               cfg_.router_mask_inf, renorm, cfg_.routed_scaling_factor, ids.data(), w.data());
  for (int64_t i = 0; i < T * K; ++i) by_expert[ids[i]].push_back({i / K, w[i]});
}

std::vector<float> CpuBackend::logits(Rows& rr, std::span<const int64_t> rows) {
  CpuRows& r = rows_of(rr);
  const int64_t D = cfg_.hidden_size, n = static_cast<int64_t>(rows.size());
  std::vector<float> x(n * D), out(n * cfg_.vocab_size);
  for (int64_t i = 0; i < n; ++i) {
    HYPIC_ASSERT(rows[i] >= 0 && rows[i] < r.T, "logits: row out of range");
    cpu::rmsnorm(r.h.data() + rows[i] * D, x.data() + i * D, 1, D, w_.final_norm.data(), cfg_.rms_norm_eps,
                 cfg_.zero_centred_norms);
  }
  apply(w_.lm_head, x.data(), n, out.data());
  return out;
}

void CpuBackend::save_linear(int layer, const State& s, float* S, void* conv_tail) {
  const LinearLayerState& st = cpu_state(s).layers[layer].lin;
  if (S) std::copy(st.S.begin(), st.S.end(), S);
  if (conv_tail) std::copy(st.conv_tail.begin(), st.conv_tail.end(), static_cast<float*>(conv_tail));
}

void CpuBackend::load_linear(int layer, State& s, const float* S, const void* conv_tail) {
  LinearLayerState& st = cpu_state(s).layers[layer].lin;
  if (S) std::copy_n(S, st.S.size(), st.S.begin());
  if (conv_tail) std::copy_n(static_cast<const float*>(conv_tail), st.conv_tail.size(), st.conv_tail.begin());
}

void CpuBackend::compose_linear(int layer, State& s, const float* T, const float* body, Composition how,
                                int64_t rotate) {
  LinearLayerState& st = cpu_state(s).layers[layer].lin;
  std::vector<float> moved;
  if (cfg_.linear_rope && rotate != 0) {  // the body's keys were rotated at local positions: move them
    moved.assign(body, body + st.S.size());
    cpu::rope_shift_state(moved.data(), cfg_.lin_v_heads, cfg_.lin_k_dim, cfg_.lin_v_dim, cfg_.rotary_dim, rotate,
                          cfg_.rope_theta);
    body = moved.data();
  }
  if (how == Composition::Transfer) {
    cpu::transfer_apply(transfer_shape(cfg_), T, st.S.data(), body, st.S.data());
  } else {
    for (size_t i = 0; i < st.S.size(); ++i) st.S[i] += body[i];
  }
}

void CpuBackend::empty_body(float* T, float* body) {
  const cpu::TransferShape ts = transfer_shape(cfg_);
  cpu::transfer_identity(ts, T);
  std::fill_n(body, cpu::state_numel(ts), 0.0f);
}

void CpuBackend::shift_linear_state(float* S, int64_t delta) {
  if (cfg_.linear_rope && delta != 0)
    cpu::rope_shift_state(S, cfg_.lin_v_heads, cfg_.lin_k_dim, cfg_.lin_v_dim, cfg_.rotary_dim, delta, cfg_.rope_theta);
}

void CpuBackend::linear_body(int layer, Rows& r, int64_t row0, int64_t n, State& s, float* T, float* body) {
  // In fp32 the zero-start state follows from linearity without loss: S(body | 0) = S_full - T S_start.
  const cpu::TransferShape ts = transfer_shape(cfg_);
  const std::vector<float> start = cpu_state(s).layers[layer].lin.S;
  cpu::transfer_identity(ts, T);
  linear_recur(layer, r, row0, n, s, T);
  const std::vector<float>& full = cpu_state(s).layers[layer].lin.S;
  std::vector<float> zero(start.size(), 0.0f);
  cpu::transfer_apply(ts, T, start.data(), zero.data(), body);
  for (size_t i = 0; i < start.size(); ++i) body[i] = full[i] - body[i];
}

void CpuBackend::append_kv(int layer, State& s, const void* k, const void* v, int64_t n, std::span<const int64_t> pos,
                           int64_t rotate) {
  if (n <= 0) return;
  HYPIC_ASSERT(static_cast<int64_t>(pos.size()) == n, "append_kv: one position per row");
  AttentionLayerState& kv = cpu_state(s).layers[layer].attn;
  const int64_t Hkv = cfg_.num_kv_heads, hd = cfg_.head_dim, row = Hkv * hd;
  const size_t r0 = kv.k.size();
  const float *kf = static_cast<const float*>(k), *vf = static_cast<const float*>(v);
  kv.k.insert(kv.k.end(), kf, kf + n * row);
  kv.v.insert(kv.v.end(), vf, vf + n * row);
  kv.pos.insert(kv.pos.end(), pos.begin(), pos.end());
  if (rotate) cpu::rope_shift(kv.k.data() + r0, n, Hkv, hd, cfg_.rotary_dim, rotate, cfg_.rope_theta);
}

void CpuBackend::save_kv(int layer, const State& s, int64_t row, int64_t n, void* k, void* v, int64_t at,
                         int64_t rotate) {
  const AttentionLayerState& kv = cpu_state(s).layers[layer].attn;
  const int64_t Hkv = cfg_.num_kv_heads, hd = cfg_.head_dim, rw = Hkv * hd;
  HYPIC_ASSERT(row >= 0 && row + n <= kv.rows(), "save_kv: rows out of range");
  float* kd = static_cast<float*>(k) + at * rw;
  std::copy_n(kv.k.data() + row * rw, n * rw, kd);
  std::copy_n(kv.v.data() + row * rw, n * rw, static_cast<float*>(v) + at * rw);
  if (rotate) cpu::rope_shift(kd, n, Hkv, hd, cfg_.rotary_dim, rotate, cfg_.rope_theta);
}

int64_t CpuBackend::kv_rows(int layer, const State& s) const { return cpu_state(s).layers[layer].attn.rows(); }

std::unique_ptr<SequenceState> CpuBackend::to_host(const State& s) {
  return std::make_unique<SequenceState>(cpu_state(s));
}

std::vector<float> CpuBackend::to_host(const void* data, size_t n, DType t) {
  HYPIC_ASSERT(t == DType::F32, "CPU backend memory holds fp32");
  const float* f = static_cast<const float*>(data);
  return std::vector<float>(f, f + n);
}

// CPU backend memory is host memory.
void CpuBackend::copy_to_host(const void* src, void* host_dst, size_t bytes) {
  if (bytes) std::memcpy(host_dst, src, bytes);
}
void CpuBackend::copy_from_host(const void* host_src, void* dst, size_t bytes) {
  if (bytes) std::memcpy(dst, host_src, bytes);
}

}  // namespace hypic
