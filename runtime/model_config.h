// Hugging Face config.json of the supported hybrid families, normalised to one struct.
// Supported model_type: qwen3_next, qwen3_5_text, qwen3_5_moe_text, the VL wrappers qwen3_5 /
// qwen3_5_moe (text settings under text_config, weights under model.language_model.*), and
// bailing_moe_linear (Ring-mini/flash-linear-2.0) and minimax (MiniMax-Text-01/M1), both with lightning
// linear layers, and kimi_linear (Kimi-Linear) and bailing_hybrid (Ring-2.5), both with KDA linear layers and
// MLA full attention (docs/engine.md).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace hypic {

enum class LayerKind { LinearAttention, FullAttention };

// The recurrence of the linear layers: the Gated DeltaNet delta rule (Qwen3-Next, Qwen3.5; dense
// transfer operator [Hv, dk, dk]), lightning attention, a fixed scalar decay per head (Ring, MiniMax;
// transfer operator [Hv], one number per head), or Kimi Delta Attention, the delta rule with a decay per
// key channel (Kimi-Linear; dense, non-symmetric transfer operator [Hv, dk, dk]).
enum class LinearKind { GatedDeltaNet, Lightning, Kda };

// How the MoE router scores experts: softmax then top-k (Qwen), or sigmoid plus a per-expert bias used
// only for the choice, top-k within the best groups, weights renormalised and scaled (Ring).
enum class RouterKind { SoftmaxTopK, SigmoidGroupTopK };

// The two lightning layers: Ring (q/k RMSNorm then RoPE, q scaled by d^-1/2, group RMSNorm of the output)
// and MiniMax (SiLU on q | k | v, projection rows interleaved per head, no norm, RoPE or scale on q/k, one
// RMSNorm over the whole output).
enum class LightningStyle { Ring, MiniMax };
struct ModelConfig {
  std::string model_type;       // the top-level model_type as written
  std::string text_model_type;  // qwen3_next | qwen3_5_text | qwen3_5_moe_text | bailing_moe_linear | minimax |
                                // kimi_linear | bailing_hybrid
  std::string weight_prefix;    // "model." or "model.language_model."

  int64_t hidden_size = 0;
  int64_t num_layers = 0;
  int64_t vocab_size = 0;
  int64_t max_positions = 0;  // max_position_embeddings; 0 when the config does not say
  float rms_norm_eps = 1e-6f;
  bool tie_word_embeddings = false;
  bool zero_centred_norms = true;  // RMSNorm weights as (1 + w) (Qwen) or w (Ring, MiniMax)
  // MiniMax's residual is taken after the norm: x = alpha * norm(x) + beta * f(norm(x)), with factors per
  // sublayer kind. The others: x = x + f(norm(x)).
  bool residual_from_norm = false;
  float linear_alpha = 1, linear_beta = 1, full_alpha = 1, full_beta = 1, mlp_alpha = 1, mlp_beta = 1;

  // Full attention.
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  bool attn_output_gate = true;
  bool attn_qk_norm = true;  // RMSNorm on q and k per head (MiniMax has none)
  double rope_theta = 10000.0;
  int64_t rotary_dim = 0;  // 0: no RoPE (Kimi's MLA)
  // Multi-head latent attention (Kimi-Linear, without RoPE): keys [k_nope (per head) | k_rope (shared)] of
  // head_dim = qk_nope_dim + qk_rope_dim, values of v_head_dim <= head_dim. The attention state keeps
  // decompressed per-head K/V rows of head_dim (values zero-padded to it), num_kv_heads = num_heads.
  // Ring-2.5 (bailing_hybrid): RoPE on the qk_rope part (rotary_dim = qk_rope_dim; the engine's rows keep
  // the rotated dims first: [rope | nope]) and a sigmoid output gate per head.
  bool mla = false;
  bool mla_head_gate = false;
  int64_t kv_lora_rank = 0, qk_nope_dim = 0, qk_rope_dim = 0, v_head_dim = 0;

  // Linear layers (for Lightning: Hk = Hv = num_heads, dk = dv = head_dim, no conv: conv_kernel 1).
  LinearKind linear_kind = LinearKind::GatedDeltaNet;
  LightningStyle lightning_style = LightningStyle::Ring;
  bool linear_rope = false;      // q/k of the linear layers are rotated: states carry absolute rotation
  int64_t group_norm_size = 1;   // Lightning: groups of the output RMSNorm
  int64_t lin_k_heads = 0;
  int64_t lin_v_heads = 0;
  int64_t lin_k_dim = 0;
  int64_t lin_v_dim = 0;
  int64_t conv_kernel = 4;
  bool grouped_linear_proj = false;  // Qwen3-Next in_proj_qkvz / in_proj_ba
  // KDA: low-rank forget and output gates (Kimi f_a/f_b, g_a/g_b) or full-rank ones (Ring-2.5 f_proj, g_proj);
  // the forget gate g = -exp(A_log) softplus(f + dt_bias) (0 here) or, bounded (Ring-2.5's safe gate),
  // g = lower_bound * sigmoid(exp(A_log) (f + dt_bias)).
  bool kda_low_rank_gates = true;
  float kda_gate_lower_bound = 0.0f;

  // Feed-forward.
  int64_t intermediate_size = 0;  // dense SwiGLU
  int64_t num_experts = 0;
  int64_t experts_per_tok = 0;
  int64_t moe_intermediate_size = 0;
  int64_t shared_expert_intermediate_size = 0;
  bool norm_topk_prob = true;
  bool shared_expert_gate = true;  // a sigmoid gate on the shared expert (Qwen); Ring has none
  RouterKind router = RouterKind::SoftmaxTopK;
  int64_t n_group = 1, topk_group = 1;  // SigmoidGroupTopK: expert groups, groups kept
  // SigmoidGroupTopK as DeepSeek-V3 / Kimi route: experts of the dropped groups are masked with -inf (Ring
  // sets their choice scores to 0) and the weights are renormalised for top-1 too.
  bool router_mask_inf = false;
  float routed_scaling_factor = 1.0f;

  std::vector<LayerKind> layer_kinds;
  std::vector<bool> layer_is_moe;
  std::string fingerprint;  // stable hash of the normalised settings (cache keys)

  int64_t lin_key_dim() const { return lin_k_heads * lin_k_dim; }
  int64_t lin_value_dim() const { return lin_v_heads * lin_v_dim; }
  int64_t lin_conv_dim() const { return 2 * lin_key_dim() + lin_value_dim(); }
  int64_t num_linear_layers() const;
  // Elements of one linear layer's transfer operator (fp32): Hv * dk * dk (dense) or Hv (scalar).
  int64_t lin_transfer_numel() const;
  // The lightning decay log(lambda_h) of linear layer `layer`, per head (Hv values).
  std::vector<float> lightning_log_decay(int64_t layer) const;
  // Throws ModelError naming the setting when the CUDA kernels cannot run this shape (linear-layer head
  // dims above 128 for lightning and KDA, attention head dims above 256 or not a multiple of 8).
  void check_cuda_supported() const;
  // Throws InvalidArgument when a sequence of `length` tokens does not fit the model's context.
  void check_length(int64_t length) const;

  // Parses config.json (throws FormatError / ModelError naming the file and key).
  static ModelConfig load(const std::string& config_json_path);
  static ModelConfig from_json(const nlohmann::json& j, const std::string& where);

 private:
  static ModelConfig from_json_checked(const nlohmann::json& j, const std::string& where);
  // Checks common to every family and the fingerprint.
  static ModelConfig finish(ModelConfig& c, const std::string& where);
  // The family-specific rest of the config: linear layers, layer schedule and feed-forward.
  static void qwen_linear_from_json(ModelConfig& c, const nlohmann::json& t, const std::string& where);
  static void bailing_linear_from_json(ModelConfig& c, const nlohmann::json& t, const std::string& where);
  static void minimax_from_json(ModelConfig& c, const nlohmann::json& t, const std::string& where);
  static void kda_mla_from_json(ModelConfig& c, const nlohmann::json& t, const std::string& where);
};

}  // namespace hypic
