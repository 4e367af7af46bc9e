#include "runtime/cuda/device_weights.h"

#include <algorithm>
#include <cmath>
#include <random>

#include "kernels/cuda/check.h"
#include "kernels/cuda/model_glue.h"
#include "kernels/dtype.h"
#include "runtime/error.h"

namespace hypic {
using cuda::bf16;

cuda::bf16* DeviceWeights::alloc_bf16(size_t n) {
  blocks_.emplace_back(sizeof(bf16) * n);
  return blocks_.back().as<bf16>();
}

float* DeviceWeights::alloc_f32(size_t n) {
  blocks_.emplace_back(sizeof(float) * n);
  return blocks_.back().as<float>();
}

DeviceLinear DeviceWeights::alloc_linear(int64_t out, int64_t in) {
  return {alloc_bf16(static_cast<size_t>(out * in)), out, in};
}

size_t DeviceWeights::bytes() const {
  size_t n = 0;
  for (auto& b : blocks_) n += b.bytes();
  return n;
}

DeviceWeights DeviceWeights::allocate(const ModelConfig& cfg, bool tie_lm_head) {
  DeviceWeights d;
  const int64_t D = cfg.hidden_size, V = cfg.vocab_size;
  d.embed = d.alloc_linear(V, D);
  d.lm_head = tie_lm_head ? d.embed : d.alloc_linear(V, D);
  d.final_norm = d.alloc_f32(D);
  for (int64_t i = 0; i < cfg.num_layers; ++i) {
    DeviceLayer L;
    L.kind = cfg.layer_kinds[i];
    L.moe = cfg.layer_is_moe[i];
    L.input_norm = d.alloc_f32(D);
    L.post_norm = d.alloc_f32(D);
    if (L.kind == LayerKind::LinearAttention && cfg.linear_kind == LinearKind::Lightning) {
      const int64_t H = cfg.lin_v_heads, hd = cfg.lin_k_dim, W = H * hd;
      DeviceLightning& g = L.lightning;
      g.qkv = d.alloc_linear(3 * W, D);
      g.gate = d.alloc_linear(W, D);
      g.out = d.alloc_linear(D, W);
      if (cfg.lightning_style == LightningStyle::Ring) {
        g.q_norm = d.alloc_f32(hd);
        g.k_norm = d.alloc_f32(hd);
      }
      g.g_norm = d.alloc_f32(W);
      g.log_decay = d.alloc_f32(H);
    } else if (L.kind == LayerKind::LinearAttention && cfg.linear_kind == LinearKind::Kda) {
      const int64_t H = cfg.lin_v_heads, dk = cfg.lin_k_dim, W = H * dk;
      DeviceKda& g = L.kda;
      g.qkv = d.alloc_linear(3 * W, D);
      if (cfg.kda_low_rank_gates) {
        g.f_a = d.alloc_linear(dk, D);
        g.f_b = d.alloc_linear(W, dk);
        g.g_a = d.alloc_linear(dk, D);
        g.g_b = d.alloc_linear(W, dk);
      } else {
        g.f_b = d.alloc_linear(W, D);
        g.g_b = d.alloc_linear(W, D);
      }
      g.b = d.alloc_linear(H, D);
      g.out = d.alloc_linear(D, W);
      g.conv_w = d.alloc_bf16(static_cast<size_t>(3 * W * cfg.conv_kernel));
      g.A_log = d.alloc_f32(H);
      g.dt_bias = d.alloc_f32(W);
      g.o_norm = d.alloc_f32(dk);
    } else if (L.kind == LayerKind::LinearAttention) {
      const int64_t Hv = cfg.lin_v_heads, vd = cfg.lin_value_dim(), C = cfg.lin_conv_dim();
      L.lin.qkv = d.alloc_linear(C, D);
      L.lin.z = d.alloc_linear(vd, D);
      L.lin.ba = d.alloc_linear(2 * Hv, D);
      L.lin.out = d.alloc_linear(D, vd);
      L.lin.conv_w = d.alloc_bf16(static_cast<size_t>(C * cfg.conv_kernel));
      L.lin.A_log = d.alloc_f32(Hv);
      L.lin.dt_bias = d.alloc_f32(Hv);
      L.lin.norm_w = d.alloc_f32(cfg.lin_v_dim);
    } else if (cfg.mla) {
      const int64_t H = cfg.num_heads, R = cfg.kv_lora_rank;
      L.attn.q = d.alloc_linear(H * cfg.head_dim, D);
      L.attn.o = d.alloc_linear(D, H * cfg.v_head_dim);
      L.mla.kv_a = d.alloc_linear(R + cfg.qk_rope_dim, D);
      L.mla.kv_norm = d.alloc_f32(R);
      L.mla.kv_b = d.alloc_linear(H * (cfg.qk_nope_dim + cfg.v_head_dim), R);
      if (cfg.mla_head_gate) L.mla.head_gate = d.alloc_linear(H, D);
    } else {
      const int64_t qd = cfg.num_heads * cfg.head_dim, kvd = cfg.num_kv_heads * cfg.head_dim;
      L.attn.q = d.alloc_linear(qd * (cfg.attn_output_gate ? 2 : 1), D);
      L.attn.k = d.alloc_linear(kvd, D);
      L.attn.v = d.alloc_linear(kvd, D);
      L.attn.o = d.alloc_linear(D, qd);
      if (cfg.attn_qk_norm) {
        L.attn.q_norm = d.alloc_f32(cfg.head_dim);
        L.attn.k_norm = d.alloc_f32(cfg.head_dim);
      }
    }
    if (L.moe) {
      const int64_t E = cfg.num_experts, I = cfg.moe_intermediate_size, Is = cfg.shared_expert_intermediate_size;
      DeviceMoe& m = L.moe_w;
      m.router = d.alloc_linear(E, D);
      if (cfg.router == RouterKind::SigmoidGroupTopK) m.expert_bias = d.alloc_f32(E);
      m.gate_up = d.alloc_bf16(static_cast<size_t>(E * 2 * I * D));
      m.down = d.alloc_bf16(static_cast<size_t>(E * D * I));
      for (int64_t e = 0; e < E; ++e) {
        m.gate_up_ptrs.push_back(m.gate_up + e * 2 * I * D);
        m.down_ptrs.push_back(m.down + e * D * I);
      }
      if (Is > 0) {
        m.has_shared = true;
        m.shared = {d.alloc_linear(2 * Is, D), d.alloc_linear(D, Is)};
        if (cfg.shared_expert_gate) m.shared_gate = d.alloc_linear(1, D);
      }
    } else {
      L.mlp = {d.alloc_linear(2 * cfg.intermediate_size, D), d.alloc_linear(D, cfg.intermediate_size)};
    }
    d.layers.push_back(std::move(L));
  }
  return d;
}

// ---------------------------------------------------------------------------------------------------
// From a checkpoint.
namespace {

class Uploader {
 public:
  explicit Uploader(cudaStream_t s) : s_(s) {}

  // dst[0 .. out*in) = bf16(src). BF16 goes straight over; F32/F16 through a device staging buffer.
  void linear(const Linear& src, bf16* dst) {
    const int64_t n = src.out * src.in;
    if (src.dtype == DType::BF16) {
      HYPIC_CUDA_CHECK(cudaMemcpyAsync(dst, src.data, sizeof(bf16) * n, cudaMemcpyHostToDevice, s_));
      return;
    }
    const size_t esz = dtype_size(src.dtype);
    if (staging_.bytes() == 0) staging_ = DeviceMemory(kChunk * sizeof(float));
    for (int64_t off = 0; off < n; off += kChunk) {
      const int64_t m = std::min<int64_t>(kChunk, n - off);
      // Pageable-memory copies wait for earlier work on the stream, so the staging buffer is free again.
      HYPIC_CUDA_CHECK(cudaMemcpyAsync(staging_.get(), static_cast<const char*>(src.data) + off * esz, m * esz,
                                       cudaMemcpyHostToDevice, s_));
      cuda::convert_to_bf16(staging_.get(), src.dtype, m, dst + off, s_);
    }
  }

  void vec(const std::vector<float>& src, float* dst) {
    HYPIC_CUDA_CHECK(cudaMemcpyAsync(dst, src.data(), sizeof(float) * src.size(), cudaMemcpyHostToDevice, s_));
  }

  void vec_bf16(const std::vector<float>& src, bf16* dst) {
    std::vector<uint16_t> h(src.size());
    for (size_t i = 0; i < src.size(); ++i) h[i] = f32_to_bf16(src[i]);
    HYPIC_CUDA_CHECK(cudaMemcpyAsync(dst, h.data(), 2 * h.size(), cudaMemcpyHostToDevice, s_));
    HYPIC_CUDA_CHECK(cudaStreamSynchronize(s_));  // h dies here
  }

  // An MLP's gate and up matrices stacked as one [2I, D] matrix.
  void gate_up(const MlpWeights& m, bf16* dst) {
    linear(m.gate, dst);
    linear(m.up, dst + m.gate.out * m.gate.in);
  }

 private:
  static constexpr int64_t kChunk = int64_t{1} << 24;
  cudaStream_t s_;
  DeviceMemory staging_;
};

}  // namespace

DeviceWeights DeviceWeights::upload(const ModelConfig& cfg, const ModelWeights& w, cudaStream_t stream) {
  HYPIC_ASSERT(static_cast<int64_t>(w.layers.size()) == cfg.num_layers, "weights of another config");
  const bool tied = w.lm_head.data == w.embed.data;
  DeviceWeights d = allocate(cfg, tied);
  Uploader u(stream);
  u.linear(w.embed, d.embed.w);
  if (!tied) u.linear(w.lm_head, d.lm_head.w);
  u.vec(w.final_norm, d.final_norm);
  for (int64_t i = 0; i < cfg.num_layers; ++i) {
    const LayerWeights& s = w.layers[i];
    DeviceLayer& L = d.layers[i];
    u.vec(s.input_norm, L.input_norm);
    u.vec(s.post_norm, L.post_norm);
    if (L.kind == LayerKind::LinearAttention && cfg.linear_kind == LinearKind::Lightning) {
      const LightningWeights& g = s.lightning;
      u.linear(g.qkv, L.lightning.qkv.w);
      u.linear(g.gate, L.lightning.gate.w);
      u.linear(g.out, L.lightning.out.w);
      if (L.lightning.q_norm) {
        u.vec(g.q_norm, L.lightning.q_norm);
        u.vec(g.k_norm, L.lightning.k_norm);
      }
      u.vec(g.g_norm, L.lightning.g_norm);
      u.vec(g.log_decay, L.lightning.log_decay);
    } else if (L.kind == LayerKind::LinearAttention && cfg.linear_kind == LinearKind::Kda) {
      const KdaWeights& g = s.kda;
      DeviceKda& k = L.kda;
      const int64_t per = g.q.out * g.q.in;  // elements of each of the three stacked matrices
      u.linear(g.q, k.qkv.w);
      u.linear(g.k, k.qkv.w + per);
      u.linear(g.v, k.qkv.w + 2 * per);
      if (k.f_a.w) {
        u.linear(g.f_a, k.f_a.w);
        u.linear(g.g_a, k.g_a.w);
      }
      u.linear(g.f_b, k.f_b.w);
      u.linear(g.g_b, k.g_b.w);
      u.linear(g.b, k.b.w);
      u.linear(g.out, k.out.w);
      u.vec_bf16(g.conv_w, k.conv_w);
      u.vec(g.A_log, k.A_log);
      u.vec(g.dt_bias, k.dt_bias);
      u.vec(g.o_norm, k.o_norm);
    } else if (L.kind == LayerKind::LinearAttention) {
      u.linear(s.lin.in_qkv, L.lin.qkv.w);
      u.linear(s.lin.in_z, L.lin.z.w);
      u.linear(s.lin.in_b, L.lin.ba.w);
      u.linear(s.lin.in_a, L.lin.ba.w + s.lin.in_b.out * s.lin.in_b.in);
      u.linear(s.lin.out, L.lin.out.w);
      u.vec_bf16(s.lin.conv_w, L.lin.conv_w);
      u.vec(s.lin.A_log, L.lin.A_log);
      u.vec(s.lin.dt_bias, L.lin.dt_bias);
      u.vec(s.lin.norm_w, L.lin.norm_w);
    } else if (cfg.mla) {
      u.linear(s.attn.q, L.attn.q.w);
      u.linear(s.attn.o, L.attn.o.w);
      u.linear(s.mla.kv_a, L.mla.kv_a.w);
      u.vec(s.mla.kv_norm, L.mla.kv_norm);
      u.linear(s.mla.kv_b, L.mla.kv_b.w);
      if (L.mla.head_gate.w) u.linear(s.mla.head_gate, L.mla.head_gate.w);
    } else {
      u.linear(s.attn.q, L.attn.q.w);
      u.linear(s.attn.k, L.attn.k.w);
      u.linear(s.attn.v, L.attn.v.w);
      u.linear(s.attn.o, L.attn.o.w);
      if (L.attn.q_norm) {
        u.vec(s.attn.q_norm, L.attn.q_norm);
        u.vec(s.attn.k_norm, L.attn.k_norm);
      }
    }
    if (L.moe) {
      const MoeWeights& m = s.moe_w;
      u.linear(m.router, L.moe_w.router.w);
      if (L.moe_w.expert_bias) u.vec(m.expert_bias, L.moe_w.expert_bias);
      const int64_t D = cfg.hidden_size, I = cfg.moe_intermediate_size;
      for (size_t e = 0; e < m.experts.size(); ++e) {
        u.gate_up(m.experts[e], L.moe_w.gate_up + e * 2 * I * D);
        u.linear(m.experts[e].down, L.moe_w.down + e * D * I);
      }
      if (m.has_shared) {
        u.gate_up(m.shared, L.moe_w.shared.gate_up.w);
        u.linear(m.shared.down, L.moe_w.shared.down.w);
        if (L.moe_w.shared_gate.w) u.linear(m.shared_gate, L.moe_w.shared_gate.w);
      }
    } else {
      u.gate_up(s.mlp, L.mlp.gate_up.w);
      u.linear(s.mlp.down, L.mlp.down.w);
    }
  }
  HYPIC_CUDA_CHECK(cudaStreamSynchronize(stream));
  return d;
}

// ---------------------------------------------------------------------------------------------------
// Random weights. Matrices ~ U(-b, b) with std 1/sqrt(fan_in), so every projection of an O(1) input is
// O(1); the projections that write into the residual stream are scaled by 1/sqrt(2 * layers) so the
// hidden state stays O(1) through the depth. Zero-centred norms get weight 0 (scale 1), the GDN output
// norm 1, and A_log / dt_bias follow transformers' initialisation.
namespace {

class Filler {
 public:
  Filler(uint64_t seed, cudaStream_t s) : seed_(seed), s_(s) {}

  void matrix(bf16* p, size_t n, int64_t fan_in, float extra = 1.0f) {
    const float b = extra * std::sqrt(3.0f / static_cast<float>(fan_in));
    cuda::fill_uniform(p, static_cast<int64_t>(n), -b, b, next(), s_);
  }
  void matrix(const DeviceLinear& l, float extra = 1.0f) { matrix(l.w, l.numel(), l.in, extra); }
  void constant(float* p, int64_t n, float v) { cuda::fill_uniform(p, n, v, v, 0, s_); }
  void host(float* p, const std::vector<float>& v) {
    HYPIC_CUDA_CHECK(cudaMemcpyAsync(p, v.data(), sizeof(float) * v.size(), cudaMemcpyHostToDevice, s_));
    HYPIC_CUDA_CHECK(cudaStreamSynchronize(s_));
  }

 private:
  uint64_t next() { return seed_ * 0x9e3779b97f4a7c15ull + (++count_); }
  uint64_t seed_, count_ = 0;
  cudaStream_t s_;
};

}  // namespace

DeviceWeights DeviceWeights::random(const ModelConfig& cfg, uint64_t seed, cudaStream_t stream) {
  DeviceWeights d = allocate(cfg, cfg.tie_word_embeddings);
  Filler f(seed, stream);
  const int64_t D = cfg.hidden_size;
  const float resid = 1.0f / std::sqrt(2.0f * static_cast<float>(cfg.num_layers));
  f.matrix(d.embed.w, d.embed.numel(), 3);  // fan-in 3: entries U(-1, 1), an O(1) hidden state
  if (d.lm_head.w != d.embed.w) f.matrix(d.lm_head);
  const float unit = cfg.zero_centred_norms ? 0.0f : 1.0f;  // a norm weight of scale 1
  f.constant(d.final_norm, D, unit);
  std::mt19937_64 rng(seed);
  for (int64_t i = 0; i < cfg.num_layers; ++i) {
    DeviceLayer& L = d.layers[i];
    f.constant(L.input_norm, D, unit);
    f.constant(L.post_norm, D, unit);
    if (L.kind == LayerKind::LinearAttention && cfg.linear_kind == LinearKind::Lightning) {
      DeviceLightning& g = L.lightning;
      f.matrix(g.qkv);
      f.matrix(g.gate);
      f.matrix(g.out, resid);
      if (g.q_norm) {
        f.constant(g.q_norm, cfg.lin_k_dim, 1.0f);
        f.constant(g.k_norm, cfg.lin_k_dim, 1.0f);
      }
      f.constant(g.g_norm, cfg.lin_v_heads * cfg.lin_k_dim, 1.0f);
      f.host(g.log_decay, cfg.lightning_log_decay(i));  // the decay is the config's, not a weight
    } else if (L.kind == LayerKind::LinearAttention && cfg.linear_kind == LinearKind::Kda) {
      DeviceKda& g = L.kda;
      const int64_t H = cfg.lin_v_heads, W = H * cfg.lin_k_dim;
      f.matrix(g.qkv);
      if (g.f_a.w) {
        f.matrix(g.f_a);
        f.matrix(g.g_a);
      }
      f.matrix(g.f_b);
      f.matrix(g.g_b);
      f.matrix(g.b);
      f.matrix(g.out, resid);
      f.matrix(g.conv_w, static_cast<size_t>(3 * W * cfg.conv_kernel), cfg.conv_kernel);
      // A ~ U[1, 16] as for Gated DeltaNet; dt_bias 0 (the gate's offset comes from f).
      std::uniform_real_distribution<float> a(1.0f, 16.0f);
      std::vector<float> A_log(H);
      for (auto& x : A_log) x = std::log(a(rng));
      f.host(g.A_log, A_log);
      f.constant(g.dt_bias, W, 0.0f);
      f.constant(g.o_norm, cfg.lin_k_dim, 1.0f);
    } else if (L.kind == LayerKind::LinearAttention) {
      f.matrix(L.lin.qkv);
      f.matrix(L.lin.z);
      f.matrix(L.lin.ba);
      f.matrix(L.lin.out, resid);
      f.matrix(L.lin.conv_w, static_cast<size_t>(cfg.lin_conv_dim() * cfg.conv_kernel), cfg.conv_kernel);
      // A ~ U[1, 16]; dt ~ log-uniform [1e-3, 1e-1], dt_bias = softplus^-1(dt).
      std::uniform_real_distribution<float> a(1.0f, 16.0f), ldt(std::log(1e-3f), std::log(1e-1f));
      std::vector<float> A_log(cfg.lin_v_heads), dt_bias(cfg.lin_v_heads);
      for (auto& x : A_log) x = std::log(a(rng));
      for (auto& x : dt_bias) {
        const float dt = std::exp(ldt(rng));
        x = dt + std::log(-std::expm1(-dt));
      }
      f.host(L.lin.A_log, A_log);
      f.host(L.lin.dt_bias, dt_bias);
      f.constant(L.lin.norm_w, cfg.lin_v_dim, 1.0f);
    } else if (cfg.mla) {
      f.matrix(L.attn.q);
      f.matrix(L.attn.o, resid);
      f.matrix(L.mla.kv_a);
      f.constant(L.mla.kv_norm, cfg.kv_lora_rank, 1.0f);
      f.matrix(L.mla.kv_b);
      if (L.mla.head_gate.w) f.matrix(L.mla.head_gate);
    } else {
      f.matrix(L.attn.q);
      f.matrix(L.attn.k);
      f.matrix(L.attn.v);
      f.matrix(L.attn.o, resid);
      if (L.attn.q_norm) {
        f.constant(L.attn.q_norm, cfg.head_dim, unit);
        f.constant(L.attn.k_norm, cfg.head_dim, unit);
      }
    }
    if (L.moe) {
      const int64_t E = cfg.num_experts, I = cfg.moe_intermediate_size;
      DeviceMoe& m = L.moe_w;
      f.matrix(m.router);
      if (m.expert_bias) f.constant(m.expert_bias, E, 0.0f);
      f.matrix(m.gate_up, static_cast<size_t>(E * 2 * I * D), D);
      f.matrix(m.down, static_cast<size_t>(E * D * I), I, resid);
      if (m.has_shared) {
        f.matrix(m.shared.gate_up);
        f.matrix(m.shared.down, resid);
        if (m.shared_gate.w) f.matrix(m.shared_gate);
      }
    } else {
      f.matrix(L.mlp.gate_up);
      f.matrix(L.mlp.down, resid);
    }
  }
  HYPIC_CUDA_CHECK(cudaStreamSynchronize(stream));
  return d;
}

}  // namespace hypic
