#include "runtime/model_weights.h"

#include <cstring>

#include "runtime/error.h"

namespace hypic {
namespace {

class Loader {
 public:
  Loader(const ModelConfig& cfg, ModelWeights& w) : cfg_(cfg), w_(w) {}

  Tensor tensor(const std::string& name, const std::vector<int64_t>& shape) {
    Tensor t = w_.checkpoint.get(name);
    if (t.shape() != shape)
      throw ModelError("tensor '" + name + "' has shape " + t.shape_string() + ", expected " + shape_to_string(shape) +
                       " (from config.json)");
    if (t.dtype() != DType::F32 && t.dtype() != DType::BF16 && t.dtype() != DType::F16)
      throw ModelError("tensor '" + name + "' has unsupported dtype " + dtype_name(t.dtype()));
    return t;
  }

  Linear linear(const std::string& name, int64_t out, int64_t in) {
    Tensor t = tensor(name, {out, in});
    return {t.raw(), t.dtype(), out, in};
  }

  std::vector<float> vec(const std::string& name, const std::vector<int64_t>& shape) {
    return tensor(name, shape).to_f32_vector();
  }

  // Row `r0..r0+n` of an [E, rows, cols] expert tensor as a Linear.
  Linear slice(const Tensor& t, int64_t e, int64_t r0, int64_t n, int64_t cols) {
    const int64_t rows = t.dim(1);
    const char* base = static_cast<const char*>(t.raw()) + ((e * rows + r0) * cols) * dtype_size(t.dtype());
    return {base, t.dtype(), n, cols};
  }

  // Copies the listed row ranges of a matrix into one new owned matrix (same dtype).
  Linear gather_rows(const Tensor& t, const std::vector<std::pair<int64_t, int64_t>>& ranges) {
    const int64_t cols = t.dim(1);
    const size_t row_bytes = static_cast<size_t>(cols) * dtype_size(t.dtype());
    int64_t total = 0;
    for (auto& r : ranges) total += r.second;
    auto buf = std::make_shared<std::vector<char>>(static_cast<size_t>(total) * row_bytes);
    char* dst = buf->data();
    for (auto& [r0, n] : ranges) {
      std::memcpy(dst, static_cast<const char*>(t.raw()) + r0 * row_bytes, n * row_bytes);
      dst += n * row_bytes;
    }
    w_.owned.push_back(buf);
    return {buf->data(), t.dtype(), total, cols};
  }

  void load_linear_attention(const std::string& p, GatedDeltaNetWeights& g) {
    const int64_t D = cfg_.hidden_size, Hk = cfg_.lin_k_heads, Hv = cfg_.lin_v_heads, dk = cfg_.lin_k_dim,
                  dv = cfg_.lin_v_dim, r = Hv / Hk;
    const int64_t key_dim = cfg_.lin_key_dim(), value_dim = cfg_.lin_value_dim(), conv_dim = cfg_.lin_conv_dim();
    if (cfg_.grouped_linear_proj) {
      // Qwen3-Next: per k-head group g: [q_g | k_g | v (r heads) | z (r heads)] and [b (r) | a (r)].
      const int64_t gsz = 2 * dk + 2 * r * dv;
      Tensor qkvz = tensor(p + "in_proj_qkvz.weight", {Hk * gsz, D});
      std::vector<std::pair<int64_t, int64_t>> qkv, z;
      for (int64_t h = 0; h < Hk; ++h) qkv.push_back({h * gsz, dk});
      for (int64_t h = 0; h < Hk; ++h) qkv.push_back({h * gsz + dk, dk});
      for (int64_t h = 0; h < Hk; ++h) qkv.push_back({h * gsz + 2 * dk, r * dv});
      for (int64_t h = 0; h < Hk; ++h) z.push_back({h * gsz + 2 * dk + r * dv, r * dv});
      g.in_qkv = gather_rows(qkvz, qkv);
      g.in_z = gather_rows(qkvz, z);
      Tensor ba = tensor(p + "in_proj_ba.weight", {Hk * 2 * r, D});
      std::vector<std::pair<int64_t, int64_t>> b, a;
      for (int64_t h = 0; h < Hk; ++h) b.push_back({h * 2 * r, r});
      for (int64_t h = 0; h < Hk; ++h) a.push_back({h * 2 * r + r, r});
      g.in_b = gather_rows(ba, b);
      g.in_a = gather_rows(ba, a);
    } else {
      g.in_qkv = linear(p + "in_proj_qkv.weight", 2 * key_dim + value_dim, D);
      g.in_z = linear(p + "in_proj_z.weight", value_dim, D);
      g.in_b = linear(p + "in_proj_b.weight", Hv, D);
      g.in_a = linear(p + "in_proj_a.weight", Hv, D);
    }
    g.conv_w = vec(p + "conv1d.weight", {conv_dim, 1, cfg_.conv_kernel});
    g.A_log = vec(p + "A_log", {Hv});
    g.dt_bias = vec(p + "dt_bias", {Hv});
    g.norm_w = vec(p + "norm.weight", {dv});
    g.out = linear(p + "out_proj.weight", D, value_dim);
  }

  // Row block [r0, r0 + n) of a matrix, as a view.
  static Linear rows_of(const Linear& l, int64_t r0, int64_t n) {
    return {static_cast<const char*>(l.data) + r0 * l.in * dtype_size(l.dtype), l.dtype, n, l.in};
  }

  void load_lightning(const std::string& p, int64_t layer, LightningWeights& g) {
    const int64_t D = cfg_.hidden_size, H = cfg_.lin_v_heads, hd = cfg_.lin_k_dim;
    g.qkv = linear(p + "query_key_value.weight", 3 * H * hd, D);
    g.gate = linear(p + "g_proj.weight", H * hd, D);
    g.out = linear(p + "dense.weight", D, H * hd);
    g.q_norm = vec(p + "query_layernorm.weight", {hd});
    g.k_norm = vec(p + "key_layernorm.weight", {hd});
    g.g_norm = vec(p + "g_norm.weight", {H * hd});
    g.log_decay = cfg_.lightning_log_decay(layer);
  }

  // MiniMax: qkv_proj rows are [q_h | k_h | v_h] per head; re-ordered to q | k | v as Ring's.
  void load_minimax_lightning(const std::string& p, int64_t layer, LightningWeights& g) {
    const int64_t D = cfg_.hidden_size, H = cfg_.lin_v_heads, hd = cfg_.lin_k_dim;
    Tensor qkv = tensor(p + "qkv_proj.weight", {3 * H * hd, D});
    std::vector<std::pair<int64_t, int64_t>> order;
    for (int64_t part = 0; part < 3; ++part)
      for (int64_t h = 0; h < H; ++h) order.push_back({h * 3 * hd + part * hd, hd});
    g.qkv = gather_rows(qkv, order);
    g.gate = linear(p + "output_gate.weight", H * hd, D);
    g.out = linear(p + "out_proj.weight", D, H * hd);
    g.g_norm = vec(p + "norm.weight", {H * hd});
    g.log_decay = cfg_.lightning_log_decay(layer);
  }

  // The first of `names` the checkpoint has (the released layout, then transformers' renamed one).
  std::string either(const std::vector<std::string>& names) {
    for (const auto& n : names)
      if (w_.checkpoint.has(n)) return n;
    return names.front();  // missing: the error names the released layout's tensor
  }

  // Ring-2.5's KDA: full-rank gates f_proj and g_proj, A_log [H]; names as the released checkpoint
  // (under attention.) or transformers (forget_gate.*).
  void load_ring25_kda(const std::string& p, KdaWeights& g) {
    const int64_t D = cfg_.hidden_size, H = cfg_.lin_v_heads, dk = cfg_.lin_k_dim, W = H * dk, K = cfg_.conv_kernel;
    g.q = linear(p + "q_proj.weight", W, D);
    g.k = linear(p + "k_proj.weight", W, D);
    g.v = linear(p + "v_proj.weight", W, D);
    if (w_.checkpoint.has(p + "conv1d.weight")) {
      g.conv_w = vec(p + "conv1d.weight", {3 * W, 1, K});
    } else {
      for (const char* part : {"q_conv1d.weight", "k_conv1d.weight", "v_conv1d.weight"}) {
        const std::vector<float> w = vec(p + part, {W, 1, K});
        g.conv_w.insert(g.conv_w.end(), w.begin(), w.end());
      }
    }
    g.f_b = linear(either({p + "f_proj.weight", p + "forget_gate.f_proj.weight"}), W, D);
    g.A_log = vec(either({p + "A_log", p + "forget_gate.A_log"}), {H});
    g.dt_bias = vec(either({p + "dt_bias", p + "forget_gate.dt_bias"}), {W});
    g.b = linear(p + "b_proj.weight", H, D);
    g.g_b = linear(p + "g_proj.weight", W, D);
    g.o_norm = vec(p + "o_norm.weight", {dk});
    g.out = linear(either({p + "o_proj.weight", p + "dense.weight"}), D, W);
  }

  void load_kda(const std::string& p, KdaWeights& g) {
    const int64_t D = cfg_.hidden_size, H = cfg_.lin_v_heads, dk = cfg_.lin_k_dim, W = H * dk, K = cfg_.conv_kernel;
    g.q = linear(p + "q_proj.weight", W, D);
    g.k = linear(p + "k_proj.weight", W, D);
    g.v = linear(p + "v_proj.weight", W, D);
    if (w_.checkpoint.has(p + "conv1d.weight")) {  // transformers' stacked conv
      g.conv_w = vec(p + "conv1d.weight", {3 * W, 1, K});
    } else {
      for (const char* part : {"q_conv1d.weight", "k_conv1d.weight", "v_conv1d.weight"}) {
        const std::vector<float> w = vec(p + part, {W, 1, K});
        g.conv_w.insert(g.conv_w.end(), w.begin(), w.end());
      }
    }
    g.f_a = linear(either({p + "f_a_proj.weight", p + "forget_gate.f_a_proj.weight"}), dk, D);
    g.f_b = linear(either({p + "f_b_proj.weight", p + "forget_gate.f_b_proj.weight"}), W, dk);
    g.A_log = vec(either({p + "A_log", p + "forget_gate.A_log"}), {1, 1, H, 1});
    g.dt_bias = vec(either({p + "dt_bias", p + "forget_gate.dt_bias"}), {W});
    g.b = linear(p + "b_proj.weight", H, D);
    g.g_a = linear(p + "g_a_proj.weight", dk, D);
    g.g_b = linear(p + "g_b_proj.weight", W, dk);
    g.o_norm = vec(p + "o_norm.weight", {dk});
    g.out = linear(p + "o_proj.weight", D, W);
  }

  void load_mla(const std::string& p, AttentionWeights& a, MlaWeights& m) {
    const int64_t D = cfg_.hidden_size, H = cfg_.num_heads, R = cfg_.kv_lora_rank;
    a.q = linear(p + "q_proj.weight", H * cfg_.head_dim, D);
    m.kv_a = linear(p + "kv_a_proj_with_mqa.weight", R + cfg_.qk_rope_dim, D);
    m.kv_norm = vec(p + "kv_a_layernorm.weight", {R});
    m.kv_b = linear(p + "kv_b_proj.weight", H * (cfg_.qk_nope_dim + cfg_.v_head_dim), R);
    a.o = linear(either({p + "o_proj.weight", p + "dense.weight"}), D, H * cfg_.v_head_dim);
    if (cfg_.mla_head_gate) m.head_gate = linear(p + "g_proj.weight", H, D);
  }

  // Kimi's MoE: the released layout block_sparse_moe.{gate (+ e_score_correction_bias), experts.{e}.w1/w3/w2,
  // shared_experts.*}, or transformers' mlp.{gate, experts.gate_up_proj / down_proj, shared_experts.*}.
  void load_kimi_moe(const std::string& p, MoeWeights& m) {
    const int64_t D = cfg_.hidden_size, E = cfg_.num_experts, I = cfg_.moe_intermediate_size;
    const std::string q = w_.checkpoint.has(p + "block_sparse_moe.gate.weight") ? p + "block_sparse_moe." : p + "mlp.";
    m.router = linear(q + "gate.weight", E, D);
    m.expert_bias = vec(either({q + "gate.e_score_correction_bias", q + "gate.expert_bias"}), {E});
    if (w_.checkpoint.has(q + "experts.gate_up_proj")) {
      Tensor gu = tensor(q + "experts.gate_up_proj", {E, 2 * I, D});
      Tensor dn = tensor(q + "experts.down_proj", {E, D, I});
      for (int64_t e = 0; e < E; ++e)
        m.experts.push_back({slice(gu, e, 0, I, D), slice(gu, e, I, I, D), slice(dn, e, 0, D, I)});
    } else if (w_.checkpoint.has(q + "experts.0.gate_proj.weight")) {  // Ring-2.5's per-expert names
      for (int64_t e = 0; e < E; ++e) m.experts.push_back(mlp(q + "experts." + std::to_string(e) + ".", I));
    } else {
      for (int64_t e = 0; e < E; ++e) {
        const std::string x = q + "experts." + std::to_string(e) + ".";
        m.experts.push_back({linear(x + "w1.weight", I, D), linear(x + "w3.weight", I, D), linear(x + "w2.weight", D, I)});
      }
    }
    if (cfg_.shared_expert_intermediate_size > 0) {
      m.has_shared = true;
      m.shared = mlp(q + "shared_experts.", cfg_.shared_expert_intermediate_size);
    }
  }

  void load_plain_attention(const std::string& p, AttentionWeights& a) {
    const int64_t D = cfg_.hidden_size, H = cfg_.num_heads, Hkv = cfg_.num_kv_heads, hd = cfg_.head_dim;
    a.q = linear(p + "q_proj.weight", H * hd, D);
    a.k = linear(p + "k_proj.weight", Hkv * hd, D);
    a.v = linear(p + "v_proj.weight", Hkv * hd, D);
    a.o = linear(p + "o_proj.weight", D, H * hd);
  }

  // Mixtral-style experts: the original layout block_sparse_moe.{gate, experts.{e}.w1 (gate) / w3 (up) /
  // w2 (down)}, or transformers' fused mlp.{gate, experts.gate_up_proj / down_proj}.
  void load_mixtral_moe(const std::string& p, MoeWeights& m) {
    const int64_t D = cfg_.hidden_size, E = cfg_.num_experts, I = cfg_.moe_intermediate_size;
    if (!w_.checkpoint.has(p + "block_sparse_moe.gate.weight")) return load_moe(p + "mlp.", m);
    m.router = linear(p + "block_sparse_moe.gate.weight", E, D);
    for (int64_t e = 0; e < E; ++e) {
      const std::string x = p + "block_sparse_moe.experts." + std::to_string(e) + ".";
      m.experts.push_back({linear(x + "w1.weight", I, D), linear(x + "w3.weight", I, D), linear(x + "w2.weight", D, I)});
    }
  }

  // Ring's softmax layers: one fused projection (q | k | v rows, GQA), no output gate.
  void load_bailing_attention(const std::string& p, AttentionWeights& a) {
    const int64_t D = cfg_.hidden_size, H = cfg_.num_heads, Hkv = cfg_.num_kv_heads, hd = cfg_.head_dim;
    const Linear qkv = linear(p + "query_key_value.weight", (H + 2 * Hkv) * hd, D);
    a.q = rows_of(qkv, 0, H * hd);
    a.k = rows_of(qkv, H * hd, Hkv * hd);
    a.v = rows_of(qkv, (H + Hkv) * hd, Hkv * hd);
    a.o = linear(p + "dense.weight", D, H * hd);
    a.q_norm = vec(p + "query_layernorm.weight", {hd});
    a.k_norm = vec(p + "key_layernorm.weight", {hd});
  }

  void load_attention(const std::string& p, AttentionWeights& a) {
    const int64_t D = cfg_.hidden_size, H = cfg_.num_heads, Hkv = cfg_.num_kv_heads, hd = cfg_.head_dim;
    a.q = linear(p + "q_proj.weight", H * hd * (cfg_.attn_output_gate ? 2 : 1), D);
    a.k = linear(p + "k_proj.weight", Hkv * hd, D);
    a.v = linear(p + "v_proj.weight", Hkv * hd, D);
    a.o = linear(p + "o_proj.weight", D, H * hd);
    a.q_norm = vec(p + "q_norm.weight", {hd});
    a.k_norm = vec(p + "k_norm.weight", {hd});
  }

  MlpWeights mlp(const std::string& p, int64_t I) {
    const int64_t D = cfg_.hidden_size;
    return {linear(p + "gate_proj.weight", I, D), linear(p + "up_proj.weight", I, D), linear(p + "down_proj.weight", D, I)};
  }

  void load_moe(const std::string& p, MoeWeights& m) {
    const int64_t D = cfg_.hidden_size, E = cfg_.num_experts, I = cfg_.moe_intermediate_size;
    m.router = linear(p + "gate.weight", E, D);
    if (cfg_.router == RouterKind::SigmoidGroupTopK) m.expert_bias = vec(p + "gate.expert_bias", {E});
    const auto& ck = w_.checkpoint;
    if (ck.has(p + "experts.gate_up_proj")) {  // fused: [E, 2I, D] gate rows first, and [E, D, I]
      Tensor gu = tensor(p + "experts.gate_up_proj", {E, 2 * I, D});
      Tensor dn = tensor(p + "experts.down_proj", {E, D, I});
      for (int64_t e = 0; e < E; ++e)
        m.experts.push_back({slice(gu, e, 0, I, D), slice(gu, e, I, I, D), slice(dn, e, 0, D, I)});
    } else if (ck.has(p + "experts.0.gate_proj.weight")) {
      for (int64_t e = 0; e < E; ++e) m.experts.push_back(mlp(p + "experts." + std::to_string(e) + ".", I));
    } else {
      throw ModelError("checkpoint lacks the experts of '" + p +
                       "' (neither experts.gate_up_proj nor experts.{e}.gate_proj.weight)");
    }
    if (cfg_.shared_expert_intermediate_size > 0) {
      m.has_shared = true;
      if (cfg_.shared_expert_gate) {
        m.shared = mlp(p + "shared_expert.", cfg_.shared_expert_intermediate_size);
        m.shared_gate = linear(p + "shared_expert_gate.weight", 1, D);
      } else {
        m.shared = mlp(p + "shared_experts.", cfg_.shared_expert_intermediate_size);
      }
    }
  }

 private:
  const ModelConfig& cfg_;
  ModelWeights& w_;
};

}  // namespace

ModelWeights ModelWeights::load(const ModelConfig& cfg, const std::string& dir) {
  ModelWeights w;
  w.checkpoint = Checkpoint::open(dir);
  Loader L(cfg, w);
  const std::string& P = cfg.weight_prefix;
  const int64_t D = cfg.hidden_size, V = cfg.vocab_size;
  const bool ring = cfg.linear_kind == LinearKind::Lightning && cfg.lightning_style == LightningStyle::Ring;
  const bool minimax = cfg.linear_kind == LinearKind::Lightning && cfg.lightning_style == LightningStyle::MiniMax;
  const bool kimi = cfg.linear_kind == LinearKind::Kda;
  const bool ring25 = kimi && cfg.text_model_type == "bailing_hybrid";
  w.embed = L.linear(ring     ? P + "word_embeddings.weight"
                     : ring25 ? L.either({P + "word_embeddings.weight", P + "embed_tokens.weight"})
                              : P + "embed_tokens.weight",
                     V, D);
  w.final_norm = L.vec(P + "norm.weight", {D});
  if (cfg.tie_word_embeddings && !w.checkpoint.has("lm_head.weight")) {
    w.lm_head = w.embed;
  } else {
    w.lm_head = L.linear("lm_head.weight", V, D);
  }
  for (int64_t i = 0; i < cfg.num_layers; ++i) {
    const std::string p = P + "layers." + std::to_string(i) + ".";
    LayerWeights lw;
    lw.kind = cfg.layer_kinds[i];
    lw.moe = cfg.layer_is_moe[i];
    lw.input_norm = L.vec(p + "input_layernorm.weight", {D});
    lw.post_norm = L.vec(p + "post_attention_layernorm.weight", {D});
    if (ring) {
      if (lw.kind == LayerKind::LinearAttention) L.load_lightning(p + "attention.", i, lw.lightning);
      else L.load_bailing_attention(p + "attention.", lw.attn);
    } else if (minimax) {
      if (lw.kind == LayerKind::LinearAttention) L.load_minimax_lightning(p + "self_attn.", i, lw.lightning);
      else L.load_plain_attention(p + "self_attn.", lw.attn);
    } else if (ring25) {  // the released checkpoint names the mixer attention.*, transformers self_attn.*
      const std::string a = w.checkpoint.has(p + "attention." + (lw.kind == LayerKind::LinearAttention ? "q_proj.weight"
                                                                                                          : "kv_b_proj.weight"))
                                ? p + "attention."
                                : p + "self_attn.";
      if (lw.kind == LayerKind::LinearAttention) L.load_ring25_kda(a, lw.kda);
      else L.load_mla(a, lw.attn, lw.mla);
    } else if (kimi) {
      if (lw.kind == LayerKind::LinearAttention) L.load_kda(p + "self_attn.", lw.kda);
      else L.load_mla(p + "self_attn.", lw.attn, lw.mla);
    } else if (lw.kind == LayerKind::LinearAttention) {
      L.load_linear_attention(p + "linear_attn.", lw.lin);
    } else {
      L.load_attention(p + "self_attn.", lw.attn);
    }
    if (lw.moe && minimax) L.load_mixtral_moe(p, lw.moe_w);
    else if (lw.moe && kimi) L.load_kimi_moe(p, lw.moe_w);
    else if (lw.moe) L.load_moe(p + "mlp.", lw.moe_w);
    else lw.mlp = L.mlp(p + "mlp.", cfg.intermediate_size);
    w.layers.push_back(std::move(lw));
  }
  // Fingerprint: config identity plus a sample of weight bytes (different checkpoints of one shape differ).
  uint64_t h = 1469598103934665603ull;
  auto mix = [&](const void* p, size_t n) {
    const unsigned char* b = static_cast<const unsigned char*>(p);
    for (size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 1099511628211ull;
  };
  mix(cfg.fingerprint.data(), cfg.fingerprint.size());
  auto sample = [&](const Linear& l) {
    const size_t bytes = static_cast<size_t>(l.out * l.in) * dtype_size(l.dtype);
    mix(l.data, std::min<size_t>(bytes, 4096));
    if (bytes > 4096) mix(static_cast<const char*>(l.data) + bytes - 4096, 4096);
  };
  sample(w.embed);
  sample(w.lm_head);
  for (auto& lw : w.layers)
    sample(lw.kind == LayerKind::FullAttention ? lw.attn.o
           : cfg.linear_kind == LinearKind::Lightning ? lw.lightning.out
           : cfg.linear_kind == LinearKind::Kda       ? lw.kda.out
                                                      : lw.lin.out);
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  w.fingerprint = buf;
  return w;
}

}  // namespace hypic
