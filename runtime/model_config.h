// Hugging Face config.json of the supported hybrid families, normalised to one struct.
// Supported model_type: qwen3_next, qwen3_5_text, qwen3_5_moe_text, and the VL wrappers qwen3_5 /
// qwen3_5_moe (text settings under text_config, weights under model.language_model.*).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace hypic {

enum class LayerKind { LinearAttention, FullAttention };

struct ModelConfig {
  std::string model_type;       // the top-level model_type as written
  std::string text_model_type;  // qwen3_next | qwen3_5_text | qwen3_5_moe_text
  std::string weight_prefix;    // "model." or "model.language_model."

  int64_t hidden_size = 0;
  int64_t num_layers = 0;
  int64_t vocab_size = 0;
  int64_t max_positions = 0;  // max_position_embeddings; 0 when the config does not say
  float rms_norm_eps = 1e-6f;
  bool tie_word_embeddings = false;

  // Full attention.
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  bool attn_output_gate = true;
  double rope_theta = 10000.0;
  int64_t rotary_dim = 0;

  // Gated DeltaNet.
  int64_t lin_k_heads = 0;
  int64_t lin_v_heads = 0;
  int64_t lin_k_dim = 0;
  int64_t lin_v_dim = 0;
  int64_t conv_kernel = 4;
  bool grouped_linear_proj = false;  // Qwen3-Next in_proj_qkvz / in_proj_ba

  // Feed-forward.
  int64_t intermediate_size = 0;  // dense SwiGLU
  int64_t num_experts = 0;
  int64_t experts_per_tok = 0;
  int64_t moe_intermediate_size = 0;
  int64_t shared_expert_intermediate_size = 0;
  bool norm_topk_prob = true;

  std::vector<LayerKind> layer_kinds;
  std::vector<bool> layer_is_moe;
  std::string fingerprint;  // stable hash of the normalised settings (cache keys)

  int64_t lin_key_dim() const { return lin_k_heads * lin_k_dim; }
  int64_t lin_value_dim() const { return lin_v_heads * lin_v_dim; }
  int64_t lin_conv_dim() const { return 2 * lin_key_dim() + lin_value_dim(); }
  int64_t num_linear_layers() const;
  // Throws InvalidArgument when a sequence of `length` tokens does not fit the model's context.
  void check_length(int64_t length) const;

  // Parses config.json (throws FormatError / ModelError naming the file and key).
  static ModelConfig load(const std::string& config_json_path);
  static ModelConfig from_json(const nlohmann::json& j, const std::string& where);

 private:
  static ModelConfig from_json_checked(const nlohmann::json& j, const std::string& where);
};

}  // namespace hypic
