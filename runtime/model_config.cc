#include "runtime/model_config.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <sstream>

#include <nlohmann/json.hpp>

#include "runtime/error.h"
#include "runtime/regular_file.h"

namespace hypic {
using nlohmann::json;

namespace {

// Integers are read as int64; an unsigned value above INT64_MAX would wrap, so it is refused here.
int64_t as_int(const json& v, const char* key, const std::string& where) {
  if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
    throw ModelError(where + ": '" + key + "' is out of range (" + v.dump() + ")");
  return v.get<int64_t>();
}

int64_t get_int(const json& j, const char* key, const std::string& where) {
  if (!j.contains(key) || !j[key].is_number_integer())
    throw ModelError(where + ": missing or non-integer '" + key + "'");
  return as_int(j[key], key, where);
}

int64_t get_int_or(const json& j, const char* key, int64_t fallback, const std::string& where) {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  if (!j[key].is_number_integer()) throw ModelError(where + ": '" + key + "' is not an integer");
  return as_int(j[key], key, where);
}

double get_num_or(const json& j, const char* key, double fallback, const std::string& where) {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  if (!j[key].is_number()) throw ModelError(where + ": '" + key + "' is not a number");
  const double v = j[key].get<double>();
  if (!std::isfinite(v)) throw ModelError(where + ": '" + key + "' is not a finite number");
  return v;
}

// Every size in the config must lie in [lo, hi]; one place states the allowed ranges.
void check_range(int64_t v, int64_t lo, int64_t hi, const char* key, const std::string& where) {
  if (v < lo || v > hi)
    throw ModelError(where + ": '" + key + "' is " + std::to_string(v) + ", allowed range [" + std::to_string(lo) +
                     ", " + std::to_string(hi) + "]");
}

// Upper bounds far above any real model, low enough that products of two stay well inside int64.
constexpr int64_t kMaxDim = int64_t{1} << 24;
constexpr int64_t kMaxLayers = 4096;
constexpr int64_t kMaxVocab = INT32_MAX;  // token ids are int
constexpr int64_t kMaxPositions = int64_t{1} << 40;

bool get_bool_or(const json& j, const char* key, bool fallback) {
  return j.contains(key) && j[key].is_boolean() ? j[key].get<bool>() : fallback;
}

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

}  // namespace

int64_t ModelConfig::num_linear_layers() const {
  int64_t n = 0;
  for (auto k : layer_kinds) n += k == LayerKind::LinearAttention;
  return n;
}

void ModelConfig::check_length(int64_t length) const {
  if (max_positions > 0 && length > max_positions)
    throw InvalidArgument("a sequence of " + std::to_string(length) + " tokens exceeds the model's context of " +
                          std::to_string(max_positions) + " tokens (max_position_embeddings)");
}

ModelConfig ModelConfig::load(const std::string& path) {
  const std::string text = read_regular_file(path, "model config");
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {  // parse_error, or out_of_range for a number too large
    throw FormatError("'" + path + "' is not valid JSON: " + e.what());
  }
  return from_json(j, path);
}

ModelConfig ModelConfig::from_json(const json& root, const std::string& where) {
  try {
    return from_json_checked(root, where);
  } catch (const json::exception& e) {  // a value of the wrong JSON type where a library accessor needed one
    throw ModelError(where + ": " + e.what());
  }
}

ModelConfig ModelConfig::from_json_checked(const json& root, const std::string& where) {
  if (!root.is_object()) throw FormatError(where + ": config is not a JSON object");
  ModelConfig c;
  if (!root.contains("model_type") || !root["model_type"].is_string())
    throw ModelError(where + ": missing 'model_type'");
  c.model_type = root["model_type"].get<std::string>();

  const json* tj = &root;
  if (c.model_type == "qwen3_5" || c.model_type == "qwen3_5_moe") {
    if (!root.contains("text_config") || !root["text_config"].is_object())
      throw ModelError(where + ": model_type '" + c.model_type + "' needs a 'text_config' object");
    tj = &root["text_config"];
    c.text_model_type = tj->value("model_type", c.model_type + "_text");
    c.weight_prefix = "model.language_model.";
  } else if (c.model_type == "qwen3_next" || c.model_type == "qwen3_5_text" || c.model_type == "qwen3_5_moe_text" ||
             c.model_type == "bailing_moe_linear" || c.model_type == "minimax" || c.model_type == "kimi_linear" ||
             c.model_type == "bailing_hybrid") {
    c.text_model_type = c.model_type;
    c.weight_prefix = "model.";
  } else {
    throw ModelError(where + ": unsupported model_type '" + c.model_type +
                     "' (supported: qwen3_next, qwen3_5, qwen3_5_text, qwen3_5_moe, qwen3_5_moe_text, "
                     "bailing_moe_linear, minimax, kimi_linear, bailing_hybrid)");
  }
  const json& t = *tj;
  const bool ring = c.text_model_type == "bailing_moe_linear";
  const bool minimax = c.text_model_type == "minimax";
  const bool kda_mla = c.text_model_type == "kimi_linear" || c.text_model_type == "bailing_hybrid";
  if (c.text_model_type != "qwen3_next" && c.text_model_type != "qwen3_5_text" &&
      c.text_model_type != "qwen3_5_moe_text" && !ring && !minimax && !kda_mla)
    throw ModelError(where + ": unsupported text_config model_type '" + c.text_model_type + "'");

  c.hidden_size = get_int(t, "hidden_size", where);
  check_range(c.hidden_size, 1, kMaxDim, "hidden_size", where);
  c.num_layers = get_int(t, "num_hidden_layers", where);
  check_range(c.num_layers, 1, kMaxLayers, "num_hidden_layers", where);
  c.vocab_size = get_int(t, "vocab_size", where);
  check_range(c.vocab_size, 1, kMaxVocab, "vocab_size", where);
  c.max_positions = get_int_or(t, "max_position_embeddings", 0, where);
  check_range(c.max_positions, 0, kMaxPositions, "max_position_embeddings", where);
  const double eps = get_num_or(t, "rms_norm_eps", 1e-6, where);
  // Checked as the float it is stored in: 1e-86 is positive as a double and 0 as a float.
  if (!(eps > 0 && eps < 1) || !(static_cast<float>(eps) > 0.0f))
    throw ModelError(where + ": 'rms_norm_eps' is " + std::to_string(eps) + ", allowed (0, 1) and above 1e-38");
  c.rms_norm_eps = static_cast<float>(eps);
  // The wrappers keep tie_word_embeddings at the top level; text configs inside.
  c.tie_word_embeddings = get_bool_or(t, "tie_word_embeddings", get_bool_or(root, "tie_word_embeddings", false));

  c.num_heads = get_int(t, "num_attention_heads", where);
  check_range(c.num_heads, 1, kMaxDim, "num_attention_heads", where);
  c.num_kv_heads = get_int_or(t, "num_key_value_heads", c.num_heads, where);
  check_range(c.num_kv_heads, 1, c.num_heads, "num_key_value_heads", where);
  if (kda_mla) {  // KDA + MLA (Kimi-Linear, Ring-2.5): its own head dims and RoPE settings
    kda_mla_from_json(c, t, where);
    return finish(c, where);
  }
  c.head_dim = get_int_or(t, "head_dim", c.hidden_size / c.num_heads, where);
  check_range(c.head_dim, 1, kMaxDim, "head_dim", where);
  c.attn_output_gate = ring || minimax ? false : get_bool_or(t, "attn_output_gate", true);

  // RoPE: transformers v5 nests it in rope_parameters; older configs keep it at the top level.
  double prf = ring || minimax ? 1.0 : 0.25;
  if (t.contains("rope_parameters") && t["rope_parameters"].is_object()) {
    const json& rp = t["rope_parameters"];
    const std::string type = rp.value("rope_type", std::string("default"));
    if (type != "default")
      throw ModelError(where + ": rope_type '" + type + "' is not supported (only 'default', incl. text-only M-RoPE)");
    c.rope_theta = get_num_or(rp, "rope_theta", get_num_or(t, "rope_theta", 10000.0, where), where);
    prf = get_num_or(rp, "partial_rotary_factor", get_num_or(t, "partial_rotary_factor", prf, where), where);
  } else {
    c.rope_theta = get_num_or(t, "rope_theta", 10000.0, where);
    prf = get_num_or(t, "partial_rotary_factor", prf, where);
    if (t.contains("rope_scaling") && t["rope_scaling"].is_object()) {
      const json& rs = t["rope_scaling"];
      const std::string type = rs.value("rope_type", rs.value("type", std::string("default")));
      if (type != "default")
        throw ModelError(where + ": rope_scaling type '" + type + "' is not supported");
    }
  }
  if (!(c.rope_theta > 0))
    throw ModelError(where + ": 'rope_theta' is " + std::to_string(c.rope_theta) + ", it must be positive");
  if (!(prf > 0 && prf <= 1))
    throw ModelError(where + ": 'partial_rotary_factor' is " + std::to_string(prf) + ", allowed (0, 1]");
  c.rotary_dim = static_cast<int64_t>(c.head_dim * prf);
  if (c.rotary_dim % 2 != 0 || c.rotary_dim <= 0 || c.rotary_dim > c.head_dim)
    throw ModelError(where + ": partial_rotary_factor " + std::to_string(prf) + " gives an invalid rotary dim");

  if (ring) {
    bailing_linear_from_json(c, t, where);
  } else if (minimax) {
    if (c.rotary_dim != c.head_dim)  // transformers' MiniMax rotates whole heads
      throw ModelError(where + ": 'partial_rotary_factor' below 1 is not supported for minimax");
    minimax_from_json(c, t, where);
  } else {
    qwen_linear_from_json(c, t, where);
  }
  return finish(c, where);
}

ModelConfig ModelConfig::finish(ModelConfig& c, const std::string& where) {
  const bool minimax = c.text_model_type == "minimax", ring = c.text_model_type == "bailing_moe_linear";
  if (c.num_heads % c.num_kv_heads != 0)
    throw ModelError(where + ": num_attention_heads must be a multiple of num_key_value_heads");

  std::ostringstream fp;
  fp << c.text_model_type << '|' << c.hidden_size << '|' << c.num_layers << '|' << c.vocab_size << '|' << c.num_heads
     << '|' << c.num_kv_heads << '|' << c.head_dim << '|' << c.rope_theta << '|' << c.rotary_dim << '|'
     << c.lin_k_heads << '|' << c.lin_v_heads << '|' << c.lin_k_dim << '|' << c.lin_v_dim << '|' << c.num_experts;
  if (ring || c.mla)  // the settings only Ring and Kimi have (appended so the Qwen fingerprints stay what they were)
    fp << '|' << c.group_norm_size << '|' << c.n_group << '|' << c.topk_group << '|' << c.routed_scaling_factor;
  if (c.mla)
    fp << "|mla|" << c.kv_lora_rank << '|' << c.qk_nope_dim << '|' << c.qk_rope_dim << '|' << c.v_head_dim << '|'
       << c.conv_kernel << '|' << c.router_mask_inf << '|' << c.mla_head_gate << '|' << c.kda_low_rank_gates << '|'
       << c.kda_gate_lower_bound;
  if (minimax)
    fp << '|' << c.linear_alpha << '|' << c.linear_beta << '|' << c.full_alpha << '|' << c.full_beta << '|'
       << c.mlp_alpha << '|' << c.mlp_beta;
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(fnv1a(fp.str())));
  c.fingerprint = buf;
  return c;
}

void ModelConfig::qwen_linear_from_json(ModelConfig& c, const json& t, const std::string& where) {
  const bool next = c.text_model_type == "qwen3_next";
  const bool moe35 = c.text_model_type == "qwen3_5_moe_text";
  c.lin_k_heads = get_int(t, "linear_num_key_heads", where);
  c.lin_v_heads = get_int(t, "linear_num_value_heads", where);
  c.lin_k_dim = get_int(t, "linear_key_head_dim", where);
  c.lin_v_dim = get_int(t, "linear_value_head_dim", where);
  c.conv_kernel = get_int_or(t, "linear_conv_kernel_dim", 4, where);
  check_range(c.lin_k_heads, 1, kMaxDim, "linear_num_key_heads", where);
  check_range(c.lin_v_heads, 1, kMaxDim, "linear_num_value_heads", where);
  check_range(c.lin_k_dim, 1, kMaxDim, "linear_key_head_dim", where);
  check_range(c.lin_v_dim, 1, kMaxDim, "linear_value_head_dim", where);
  check_range(c.conv_kernel, 1, 1024, "linear_conv_kernel_dim", where);
  c.grouped_linear_proj = next;
  if (c.lin_v_heads % c.lin_k_heads != 0)
    throw ModelError(where + ": linear_num_value_heads must be a multiple of linear_num_key_heads");

  c.intermediate_size = get_int_or(t, "intermediate_size", 0, where);
  check_range(c.intermediate_size, 0, kMaxDim, "intermediate_size", where);
  c.num_experts = get_int_or(t, "num_experts", 0, where);
  check_range(c.num_experts, 0, 1 << 16, "num_experts", where);
  if (c.text_model_type == "qwen3_5_text") c.num_experts = 0;  // dense family
  if (c.num_experts > 0) {
    c.experts_per_tok = get_int(t, "num_experts_per_tok", where);
    c.moe_intermediate_size = get_int(t, "moe_intermediate_size", where);
    c.shared_expert_intermediate_size = get_int_or(t, "shared_expert_intermediate_size", 0, where);
    check_range(c.moe_intermediate_size, 1, kMaxDim, "moe_intermediate_size", where);
    check_range(c.shared_expert_intermediate_size, 0, kMaxDim, "shared_expert_intermediate_size", where);
    c.norm_topk_prob = moe35 ? true : get_bool_or(t, "norm_topk_prob", true);
    if (c.experts_per_tok <= 0 || c.experts_per_tok > c.num_experts)
      throw ModelError(where + ": num_experts_per_tok out of range");
  }

  // Layer schedule.
  if (t.contains("layer_types") && t["layer_types"].is_array()) {
    for (auto& v : t["layer_types"]) {
      const std::string s = v.is_string() ? v.get<std::string>() : "";
      if (s == "linear_attention") c.layer_kinds.push_back(LayerKind::LinearAttention);
      else if (s == "full_attention") c.layer_kinds.push_back(LayerKind::FullAttention);
      else throw ModelError(where + ": unknown layer type " + (v.is_primitive() ? v.dump() : std::string("(a JSON ") + v.type_name() + ")") + " in layer_types");
    }
    if (static_cast<int64_t>(c.layer_kinds.size()) != c.num_layers)
      throw ModelError(where + ": layer_types has " + std::to_string(c.layer_kinds.size()) + " entries for " +
                       std::to_string(c.num_layers) + " layers");
  } else {
    const int64_t interval = get_int_or(t, "full_attention_interval", 4, where);
    check_range(interval, 1, kMaxLayers, "full_attention_interval", where);
    for (int64_t i = 0; i < c.num_layers; ++i)
      c.layer_kinds.push_back((i + 1) % interval == 0 ? LayerKind::FullAttention : LayerKind::LinearAttention);
  }
  std::vector<int64_t> mlp_only;
  if (t.contains("mlp_only_layers") && t["mlp_only_layers"].is_array())
    for (auto& v : t["mlp_only_layers"]) {
      if (!v.is_number_integer()) throw ModelError(where + ": mlp_only_layers holds a non-integer");
      mlp_only.push_back(as_int(v, "mlp_only_layers", where));
      check_range(mlp_only.back(), 0, c.num_layers - 1, "mlp_only_layers", where);
    }
  const int64_t sparse_step = next ? get_int_or(t, "decoder_sparse_step", 1, where) : 1;
  check_range(sparse_step, 1, kMaxLayers, "decoder_sparse_step", where);
  for (int64_t i = 0; i < c.num_layers; ++i) {
    bool moe = c.num_experts > 0 && (i + 1) % sparse_step == 0;
    for (auto m : mlp_only) moe = moe && m != i;
    c.layer_is_moe.push_back(moe);
    if (!moe && c.intermediate_size <= 0)
      throw ModelError(where + ": layer " + std::to_string(i) + " is dense but intermediate_size is missing");
  }
}

void ModelConfig::bailing_linear_from_json(ModelConfig& c, const json& t, const std::string& where) {
  // Settings the reference forward (mlx-lm's port of the original code) has no path for are refused, so
  // that a checkpoint using them fails to load instead of running wrongly.
  for (const char* key : {"use_qkv_bias", "use_bias", "linear_silu", "norm_head", "norm_softmax"})
    if (get_bool_or(t, key, false))
      throw ModelError(where + ": '" + std::string(key) + "' true is not supported for bailing_moe_linear");
  if (!get_bool_or(t, "use_qk_norm", true))
    throw ModelError(where + ": 'use_qk_norm' false is not supported for bailing_moe_linear");
  if (!get_bool_or(t, "use_rmsnorm", true))
    throw ModelError(where + ": 'use_rmsnorm' false is not supported for bailing_moe_linear");
  c.zero_centred_norms = false;
  c.linear_kind = LinearKind::Lightning;
  c.linear_rope = true;
  // The linear layers are multi-head (K/V heads = query heads) of width hidden_size / heads.
  c.lin_k_heads = c.lin_v_heads = c.num_heads;
  c.lin_k_dim = c.lin_v_dim = c.hidden_size / c.num_heads;
  if (c.lin_k_dim * c.num_heads != c.hidden_size || c.lin_k_dim != c.head_dim)
    throw ModelError(where + ": bailing_moe_linear needs head_dim == hidden_size / num_attention_heads (linear "
                     "layers use that width), got head_dim " + std::to_string(c.head_dim));
  c.conv_kernel = 1;  // no short convolution
  c.group_norm_size = get_int_or(t, "group_norm_size", 1, where);
  check_range(c.group_norm_size, 1, c.num_heads * c.head_dim, "group_norm_size", where);
  if ((c.num_heads * c.head_dim) % c.group_norm_size != 0)
    throw ModelError(where + ": group_norm_size must divide num_attention_heads * head_dim");

  const int64_t group = get_int(t, "layer_group_size", where);
  check_range(group, 1, kMaxLayers, "layer_group_size", where);
  for (int64_t i = 0; i < c.num_layers; ++i) {
    const bool full = (i + 1) % group == 0 || i >= c.num_layers / group * group;
    c.layer_kinds.push_back(full ? LayerKind::FullAttention : LayerKind::LinearAttention);
  }

  c.intermediate_size = get_int_or(t, "intermediate_size", 0, where);
  check_range(c.intermediate_size, 0, kMaxDim, "intermediate_size", where);
  c.num_experts = get_int_or(t, "num_experts", 0, where);
  check_range(c.num_experts, 0, 1 << 16, "num_experts", where);
  const int64_t first_dense = get_int_or(t, "first_k_dense_replace", 0, where);
  check_range(first_dense, 0, kMaxLayers, "first_k_dense_replace", where);
  if (c.num_experts > 0) {
    c.experts_per_tok = get_int(t, "num_experts_per_tok", where);
    c.moe_intermediate_size = get_int(t, "moe_intermediate_size", where);
    check_range(c.moe_intermediate_size, 1, kMaxDim, "moe_intermediate_size", where);
    if (c.experts_per_tok <= 0 || c.experts_per_tok > c.num_experts)
      throw ModelError(where + ": num_experts_per_tok out of range");
    const int64_t shared = get_int_or(t, "num_shared_experts", 0, where);
    check_range(shared, 0, 1024, "num_shared_experts", where);
    const int64_t shared_size = get_int_or(t, "moe_shared_expert_intermediate_size", c.moe_intermediate_size, where);
    check_range(shared_size, 1, kMaxDim, "moe_shared_expert_intermediate_size", where);
    c.shared_expert_intermediate_size = shared * shared_size;  // the shared experts form one wider MLP
    c.shared_expert_gate = false;
    c.norm_topk_prob = get_bool_or(t, "norm_topk_prob", true);
    const std::string score = t.contains("score_function") && t["score_function"].is_string()
                                  ? t["score_function"].get<std::string>()
                                  : "softmax";
    if (score != "sigmoid")
      throw ModelError(where + ": score_function '" + score + "' is not supported for bailing_moe_linear (sigmoid)");
    if (!get_bool_or(t, "moe_router_enable_expert_bias", false))
      throw ModelError(where + ": bailing_moe_linear without moe_router_enable_expert_bias is not supported");
    c.router = RouterKind::SigmoidGroupTopK;
    c.n_group = get_int_or(t, "n_group", 1, where);
    check_range(c.n_group, 1, c.num_experts, "n_group", where);
    if (c.num_experts % c.n_group != 0) throw ModelError(where + ": n_group must divide num_experts");
    c.topk_group = get_int_or(t, "topk_group", c.n_group, where);
    check_range(c.topk_group, 1, c.n_group, "topk_group", where);
    if (c.n_group > 1 && c.num_experts / c.n_group < 2)
      throw ModelError(where + ": expert groups need at least 2 experts (a group's score is its top-2 sum)");
    if (c.experts_per_tok > c.topk_group * (c.num_experts / c.n_group))
      throw ModelError(where + ": num_experts_per_tok exceeds the experts of the topk_group groups kept");
    const bool scaled = get_bool_or(t, "moe_router_enable_routed_scaling", true);
    const double rsf = scaled ? get_num_or(t, "routed_scaling_factor", 1.0, where) : 1.0;
    if (!(rsf > 0 && rsf <= 1e6))
      throw ModelError(where + ": 'routed_scaling_factor' is " + std::to_string(rsf) + ", allowed (0, 1e6]");
    c.routed_scaling_factor = static_cast<float>(rsf);
  }
  for (int64_t i = 0; i < c.num_layers; ++i) {
    const bool moe = c.num_experts > 0 && i >= first_dense;
    c.layer_is_moe.push_back(moe);
    if (!moe && c.intermediate_size <= 0)
      throw ModelError(where + ": layer " + std::to_string(i) + " is dense but intermediate_size is missing");
  }
}

void ModelConfig::minimax_from_json(ModelConfig& c, const json& t, const std::string& where) {
  if (t.contains("sliding_window") && !t["sliding_window"].is_null())
    throw ModelError(where + ": 'sliding_window' is not supported for minimax");
  c.zero_centred_norms = false;
  c.attn_qk_norm = false;
  c.linear_kind = LinearKind::Lightning;
  c.lightning_style = LightningStyle::MiniMax;
  c.linear_rope = false;
  c.lin_k_heads = c.lin_v_heads = c.num_heads;
  c.lin_k_dim = c.lin_v_dim = c.head_dim;
  c.conv_kernel = 1;  // no short convolution
  c.group_norm_size = 1;
  c.residual_from_norm = true;
  auto factor = [&](const char* key) {
    const double v = get_num_or(t, key, 1.0, where);
    if (std::fabs(v) > 1e6) throw ModelError(where + ": '" + std::string(key) + "' is out of range");
    return static_cast<float>(v);
  };
  c.linear_alpha = factor("linear_attn_alpha_factor");
  c.linear_beta = factor("linear_attn_beta_factor");
  c.full_alpha = factor("full_attn_alpha_factor");
  c.full_beta = factor("full_attn_beta_factor");
  c.mlp_alpha = factor("mlp_alpha_factor");
  c.mlp_beta = factor("mlp_beta_factor");

  // transformers' default when layer_types is absent: even layers full attention, odd layers lightning.
  if (t.contains("layer_types") && t["layer_types"].is_array()) {
    for (auto& v : t["layer_types"]) {
      const std::string s = v.is_string() ? v.get<std::string>() : "";
      if (s == "linear_attention") c.layer_kinds.push_back(LayerKind::LinearAttention);
      else if (s == "full_attention") c.layer_kinds.push_back(LayerKind::FullAttention);
      else throw ModelError(where + ": unknown layer type " + (v.is_primitive() ? v.dump() : std::string("(a JSON ") + v.type_name() + ")") + " in layer_types");
    }
    if (static_cast<int64_t>(c.layer_kinds.size()) != c.num_layers)
      throw ModelError(where + ": layer_types has " + std::to_string(c.layer_kinds.size()) + " entries for " +
                       std::to_string(c.num_layers) + " layers");
  } else {
    for (int64_t i = 0; i < c.num_layers; ++i)
      c.layer_kinds.push_back((i + 1) % 2 ? LayerKind::FullAttention : LayerKind::LinearAttention);
  }

  // Mixtral-style MoE on every layer: softmax, top-k renormalised, experts of intermediate_size.
  c.num_experts = get_int_or(t, "num_local_experts", get_int_or(t, "num_experts", 8, where), where);
  check_range(c.num_experts, 1, 1 << 16, "num_local_experts", where);
  c.experts_per_tok = get_int_or(t, "num_experts_per_tok", 2, where);
  if (c.experts_per_tok <= 0 || c.experts_per_tok > c.num_experts)
    throw ModelError(where + ": num_experts_per_tok out of range");
  c.moe_intermediate_size = get_int(t, "intermediate_size", where);
  check_range(c.moe_intermediate_size, 1, kMaxDim, "intermediate_size", where);
  c.norm_topk_prob = true;
  c.layer_is_moe.assign(static_cast<size_t>(c.num_layers), true);
}

// Kimi-Linear, read in the released checkpoint's config layout (linear_attn_config, num_experts,
// num_experts_per_token, moe_renormalize, num_expert_group, ...) or transformers' names for the same
// settings; and Ring-2.5 (bailing_hybrid, as transformers ships it), which shares the KDA + MLA + router
// structure with full-rank gates, a bounded forget gate, RoPE in MLA and a per-head MLA output gate.
void ModelConfig::kda_mla_from_json(ModelConfig& c, const json& t, const std::string& where) {
  const bool ring25 = c.text_model_type == "bailing_hybrid";
  const std::string fam = c.text_model_type;
  for (const char* key : {"attention_bias", "qk_layernorm"})
    if (get_bool_or(t, key, false))
      throw ModelError(where + ": '" + std::string(key) + "' true is not supported for " + fam);
  if (!ring25 && !get_bool_or(t, "mla_use_nope", true))  // the MLA layers would then rotate k_rope and q's rope part
    throw ModelError(where + ": 'mla_use_nope' false (RoPE in the MLA layers) is not supported for kimi_linear");
  if (t.contains("q_lora_rank") && !t["q_lora_rank"].is_null())
    throw ModelError(where + ": 'q_lora_rank' is not supported for " + fam + " (the released models have none)");
  if (t.contains("hidden_act") && t["hidden_act"] != "silu")
    throw ModelError(where + ": 'hidden_act' must be \"silu\" for " + fam);
  c.zero_centred_norms = false;
  c.attn_output_gate = false;
  c.max_positions = get_int_or(t, "model_max_length", c.max_positions, where);  // the released config's name
  check_range(c.max_positions, 0, kMaxPositions, "model_max_length", where);

  // MLA: per-head K/V decompressed from the latent; RoPE (Ring-2.5) on the qk_rope part only.
  c.mla = true;
  c.num_kv_heads = get_int_or(t, "num_key_value_heads", c.num_heads, where);
  if (c.num_kv_heads != c.num_heads)
    throw ModelError(where + ": 'num_key_value_heads' must equal num_attention_heads for " + fam +
                     " (MLA decompresses a key and a value per head), got " + std::to_string(c.num_kv_heads));
  c.kv_lora_rank = get_int_or(t, "kv_lora_rank", 512, where);
  check_range(c.kv_lora_rank, 1, kMaxDim, "kv_lora_rank", where);
  c.qk_nope_dim = get_int_or(t, "qk_nope_head_dim", 128, where);
  check_range(c.qk_nope_dim, 1, kMaxDim, "qk_nope_head_dim", where);
  c.qk_rope_dim = get_int_or(t, "qk_rope_head_dim", 64, where);
  check_range(c.qk_rope_dim, ring25 ? 2 : 0, kMaxDim, "qk_rope_head_dim", where);
  c.head_dim = c.qk_nope_dim + c.qk_rope_dim;
  c.v_head_dim = get_int_or(t, "v_head_dim", 128, where);
  check_range(c.v_head_dim, 1, c.head_dim, "v_head_dim", where);  // values are padded to the key head dim
  c.rotary_dim = 0;
  if (ring25) {
    if (c.qk_rope_dim % 2 != 0)
      throw ModelError(where + ": 'qk_rope_head_dim' must be even (rotated in pairs), got " +
                       std::to_string(c.qk_rope_dim));
    c.rotary_dim = c.qk_rope_dim;
    c.mla_head_gate = true;
    c.rope_theta = get_num_or(t, "rope_theta", 6e6, where);
    if (t.contains("rope_parameters") && t["rope_parameters"].is_object()) {
      const json& rp = t["rope_parameters"];
      const std::string type = rp.value("rope_type", std::string("default"));
      if (type != "default")
        throw ModelError(where + ": rope_type '" + type + "' is not supported for bailing_hybrid (only 'default')");
      c.rope_theta = get_num_or(rp, "rope_theta", c.rope_theta, where);
    }
    if (!(c.rope_theta > 0))
      throw ModelError(where + ": 'rope_theta' is " + std::to_string(c.rope_theta) + ", it must be positive");
  }

  // KDA layers (Ring-2.5: num_attention_heads heads of head_dim).
  const json no_linear = json::object();
  const json& la = !ring25 && t.contains("linear_attn_config") && t["linear_attn_config"].is_object()
                       ? t["linear_attn_config"]
                       : no_linear;
  c.linear_kind = LinearKind::Kda;
  if (ring25) {
    c.lin_k_heads = c.lin_v_heads = c.num_heads;
    c.lin_k_dim = c.lin_v_dim = get_int_or(t, "head_dim", 128, where);
    check_range(c.lin_k_dim, 1, kMaxDim, "head_dim", where);
    c.conv_kernel = get_int_or(t, "short_conv_kernel_size", 4, where);
    check_range(c.conv_kernel, 1, 1024, "short_conv_kernel_size", where);
    c.kda_low_rank_gates = false;
    if (get_bool_or(t, "kda_safe_gate", true)) {
      const double lb = get_num_or(t, "kda_lower_bound", -5.0, where);
      if (!(lb < 0 && lb >= -1e4))
        throw ModelError(where + ": 'kda_lower_bound' is " + std::to_string(lb) + ", allowed [-1e4, 0)");
      c.kda_gate_lower_bound = static_cast<float>(lb);
    }
  } else {
    c.lin_k_heads = c.lin_v_heads = get_int_or(la, "num_heads", get_int_or(t, "linear_num_heads", 32, where), where);
    check_range(c.lin_k_heads, 1, kMaxDim, "linear_attn_config.num_heads", where);
    c.lin_k_dim = c.lin_v_dim = get_int_or(la, "head_dim", get_int_or(t, "linear_head_dim", 128, where), where);
    check_range(c.lin_k_dim, 1, kMaxDim, "linear_attn_config.head_dim", where);
    c.conv_kernel =
        get_int_or(la, "short_conv_kernel_size", get_int_or(t, "linear_conv_kernel_dim", 4, where), where);
    check_range(c.conv_kernel, 1, 1024, "linear_attn_config.short_conv_kernel_size", where);
  }

  // Layer schedule: layer_types, or the 1-based kda_layers / full_attn_layers lists, or transformers' default
  // (full attention at every 4th layer after the first).
  auto kind_of = [&](const std::string& s, const json& v) {
    if (s == "linear_attention") return LayerKind::LinearAttention;
    if (s == "full_attention") return LayerKind::FullAttention;
    throw ModelError(where + ": unknown layer type " +
                     (v.is_primitive() ? v.dump() : std::string("(a JSON ") + v.type_name() + ")") + " in layer_types");
  };
  if (t.contains("layer_types") && t["layer_types"].is_array()) {
    for (auto& v : t["layer_types"]) c.layer_kinds.push_back(kind_of(v.is_string() ? v.get<std::string>() : "", v));
    if (static_cast<int64_t>(c.layer_kinds.size()) != c.num_layers)
      throw ModelError(where + ": layer_types has " + std::to_string(c.layer_kinds.size()) + " entries for " +
                       std::to_string(c.num_layers) + " layers");
  } else if (la.contains("kda_layers") && la.contains("full_attn_layers")) {
    std::vector<int> seen(static_cast<size_t>(c.num_layers), 0);
    c.layer_kinds.assign(static_cast<size_t>(c.num_layers), LayerKind::LinearAttention);
    for (const char* key : {"kda_layers", "full_attn_layers"}) {
      const std::string name = std::string("linear_attn_config.") + key;
      if (!la[key].is_array()) throw ModelError(where + ": '" + name + "' is not a list");
      for (auto& v : la[key]) {
        if (!v.is_number_integer()) throw ModelError(where + ": '" + name + "' holds a non-integer");
        const int64_t l = as_int(v, key, where);
        check_range(l, 1, c.num_layers, name.c_str(), where);  // 1-based
        if (seen[l - 1]++) throw ModelError(where + ": layer " + std::to_string(l) + " is listed twice in " +
                                            "linear_attn_config.kda_layers / full_attn_layers");
        c.layer_kinds[l - 1] = std::string(key) == "kda_layers" ? LayerKind::LinearAttention : LayerKind::FullAttention;
      }
    }
    for (int64_t i = 0; i < c.num_layers; ++i)
      if (!seen[i])
        throw ModelError(where + ": layer " + std::to_string(i + 1) +
                         " is in neither linear_attn_config.kda_layers nor full_attn_layers");
  } else if (ring25) {  // the last layer of every group of layer_group_size is MLA
    const int64_t group = get_int_or(t, "layer_group_size", 6, where);
    check_range(group, 1, kMaxLayers, "layer_group_size", where);
    for (int64_t i = 0; i < c.num_layers; ++i)
      c.layer_kinds.push_back((i + 1) % group == 0 ? LayerKind::FullAttention : LayerKind::LinearAttention);
  } else {
    for (int64_t i = 0; i < c.num_layers; ++i)
      c.layer_kinds.push_back(i > 0 && i % 4 == 0 ? LayerKind::FullAttention : LayerKind::LinearAttention);
  }

  // Feed-forward: dense SwiGLU below first_k_dense_replace (or where mlp_layer_types says "dense"), else MoE
  // with sigmoid scores plus e_score_correction_bias for the choice, group-limited top-k, renormalised and
  // scaled weights, and shared experts.
  c.intermediate_size = get_int_or(t, "intermediate_size", 0, where);
  check_range(c.intermediate_size, 0, kMaxDim, "intermediate_size", where);
  c.num_experts = get_int_or(t, "num_experts", get_int_or(t, "num_local_experts", 0, where), where);
  check_range(c.num_experts, 0, 1 << 16, "num_experts", where);
  if (c.num_experts > 0) {
    const std::string act = t.contains("moe_router_activation_func") && t["moe_router_activation_func"].is_string()
                                ? t["moe_router_activation_func"].get<std::string>()
                                : "sigmoid";
    if (act != "sigmoid")
      throw ModelError(where + ": 'moe_router_activation_func' '" + act + "' is not supported for " + fam);
    c.experts_per_tok = get_int_or(t, "num_experts_per_token", get_int_or(t, "num_experts_per_tok", 8, where), where);
    check_range(c.experts_per_tok, 1, c.num_experts, "num_experts_per_token", where);
    c.moe_intermediate_size = get_int(t, "moe_intermediate_size", where);
    check_range(c.moe_intermediate_size, 1, kMaxDim, "moe_intermediate_size", where);
    const int64_t shared = get_int_or(t, "num_shared_experts", get_int_or(t, "n_shared_experts", 1, where), where);
    check_range(shared, 0, 1024, "num_shared_experts", where);
    c.shared_expert_intermediate_size = shared * c.moe_intermediate_size;  // one MLP of the shared width
    c.shared_expert_gate = false;
    c.norm_topk_prob = get_bool_or(t, "moe_renormalize", get_bool_or(t, "norm_topk_prob", true));
    c.router = RouterKind::SigmoidGroupTopK;
    c.router_mask_inf = true;
    c.n_group = get_int_or(t, "num_expert_group", get_int_or(t, "n_group", ring25 ? 8 : 1, where), where);
    check_range(c.n_group, 1, c.num_experts, "num_expert_group", where);
    if (c.num_experts % c.n_group != 0) throw ModelError(where + ": num_expert_group must divide num_experts");
    if (c.num_experts / c.n_group < 2)
      throw ModelError(where + ": expert groups need at least 2 experts (a group's score is its top-2 sum)");
    c.topk_group = get_int_or(t, "topk_group", ring25 ? 4 : 1, where);
    check_range(c.topk_group, 1, c.n_group, "topk_group", where);
    if (c.experts_per_tok > c.topk_group * (c.num_experts / c.n_group))
      throw ModelError(where + ": num_experts_per_token exceeds the experts of the topk_group groups kept");
    const double rsf = get_num_or(t, "routed_scaling_factor", 1.0, where);
    if (!(rsf > 0 && rsf <= 1e6))
      throw ModelError(where + ": 'routed_scaling_factor' is " + std::to_string(rsf) + ", allowed (0, 1e6]");
    c.routed_scaling_factor = static_cast<float>(rsf);
  }
  if (t.contains("mlp_layer_types") && t["mlp_layer_types"].is_array()) {
    for (auto& v : t["mlp_layer_types"]) {
      const std::string s = v.is_string() ? v.get<std::string>() : "";
      if (s != "dense" && s != "sparse")
        throw ModelError(where + ": unknown entry " + (v.is_primitive() ? v.dump() : std::string("(a JSON value)")) +
                         " in mlp_layer_types (dense or sparse)");
      c.layer_is_moe.push_back(s == "sparse");
    }
    if (static_cast<int64_t>(c.layer_is_moe.size()) != c.num_layers)
      throw ModelError(where + ": mlp_layer_types has " + std::to_string(c.layer_is_moe.size()) + " entries for " +
                       std::to_string(c.num_layers) + " layers");
  } else {
    const int64_t first_dense = get_int_or(t, "first_k_dense_replace", ring25 ? 2 : 1, where);
    check_range(first_dense, 0, kMaxLayers, "first_k_dense_replace", where);
    for (int64_t i = 0; i < c.num_layers; ++i) c.layer_is_moe.push_back(i >= first_dense);
  }
  for (int64_t i = 0; i < c.num_layers; ++i) {
    if (c.layer_is_moe[i] && c.num_experts == 0)
      throw ModelError(where + ": layer " + std::to_string(i) + " is sparse but num_experts is missing");
    if (!c.layer_is_moe[i] && c.intermediate_size <= 0)
      throw ModelError(where + ": layer " + std::to_string(i) + " is dense but intermediate_size is missing");
  }
}

int64_t ModelConfig::lin_transfer_numel() const {
  return linear_kind == LinearKind::Lightning ? lin_v_heads : lin_v_heads * lin_k_dim * lin_k_dim;
}

std::vector<float> ModelConfig::lightning_log_decay(int64_t layer) const {
  // ALiBi slopes s_h (for a head count that is not a power of two: the slopes of the power p below it,
  // then every other slope of 2p), scaled per layer by 1 - (l - 1)/(L - 1) + 1e-5 with l unclamped as the
  // original model code has it (layer 0 decays slightly faster than layer 1).
  auto pow2 = [](int64_t n) {
    std::vector<double> s;
    const double start = std::pow(2.0, -std::pow(2.0, -(std::log2(static_cast<double>(n)) - 3)));
    for (int64_t i = 0; i < n; ++i) s.push_back(std::pow(start, static_cast<double>(i + 1)));
    return s;
  };
  const int64_t H = lin_v_heads;
  std::vector<double> s;
  const int64_t p = int64_t{1} << static_cast<int>(std::floor(std::log2(static_cast<double>(H))));
  if (p == H) {
    s = pow2(H);
  } else {
    s = pow2(p);
    const std::vector<double> s2 = pow2(2 * p);
    for (int64_t i = 0; i < H - p; ++i) s.push_back(s2[2 * i]);
  }
  if (lightning_style == LightningStyle::MiniMax) {
    // transformers' MiniMax: s_h = (2^(-8/H))^(h+1) for any H, factor 1 - l/(L - 1 + 1e-5) + 1e-5.
    const double base = 1.0 / std::pow(2.0, 8.0 / static_cast<double>(H));
    const double factor = 1.0 - static_cast<double>(layer) / (static_cast<double>(num_layers - 1) + 1e-5) + 1e-5;
    std::vector<float> out;
    for (int64_t h = 0; h < H; ++h) out.push_back(static_cast<float>(-std::pow(base, h + 1.0) * factor));
    return out;
  }
  const double denom = num_layers > 1 ? static_cast<double>(num_layers - 1) : 1.0;
  const double factor = 1.0 - static_cast<double>(layer - 1) / denom + 1e-5;
  std::vector<float> out;
  for (double v : s) out.push_back(static_cast<float>(-v * factor));
  return out;
}

void ModelConfig::check_cuda_supported() const {
  const std::string who = "model family '" + text_model_type + "' on the CUDA backend: ";
  if (linear_kind != LinearKind::GatedDeltaNet && lin_k_dim > 128)
    throw ModelError(who + "linear-layer head dim " + std::to_string(lin_k_dim) +
                     " is above the lightning / KDA kernels' 128; run it with --device cpu");
  if (head_dim % 8 != 0 || head_dim > 256)
    throw ModelError(who + "attention head dim " + std::to_string(head_dim) +
                     " is not a multiple of 8 up to 256 (the attention kernels' rows); run it with --device cpu");
}

}  // namespace hypic
