// config.json values outside their allowed ranges: each is refused with a ModelError naming the file
// and the key (several used to divide by zero or run and print garbage). Ring's bailing_moe_linear: its
// layer schedule, decay slopes and refused settings.
#include <sys/stat.h>

#include <gtest/gtest.h>

#include <cmath>
#include <functional>

#include <nlohmann/json.hpp>

#include "runtime/error.h"
#include "runtime/model_config.h"
#include "tests/sdk/temp_dir.h"

namespace hypic {
namespace {
using nlohmann::json;

json base_config() {
  return json::parse(R"({"model_type": "qwen3_next", "hidden_size": 64, "num_hidden_layers": 8, "vocab_size": 448,
    "head_dim": 32, "intermediate_size": 128, "linear_conv_kernel_dim": 4, "linear_key_head_dim": 16,
    "linear_num_key_heads": 2, "linear_num_value_heads": 4, "linear_value_head_dim": 24,
    "max_position_embeddings": 4096, "moe_intermediate_size": 32, "num_attention_heads": 4, "num_experts": 8,
    "num_experts_per_tok": 2, "num_key_value_heads": 2, "partial_rotary_factor": 0.25, "rms_norm_eps": 1e-6,
    "rope_theta": 10000.0, "shared_expert_intermediate_size": 32, "full_attention_interval": 4,
    "decoder_sparse_step": 1})");
}

std::string error_of(const json& j) {
  try {
    ModelConfig::from_json(j, "cfg/config.json");
  } catch (const ModelError& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("wrong exception type: ") + e.what();
  }
  return "accepted";
}

TEST(ModelConfig, TheBaseConfigIsAccepted) {
  const ModelConfig c = ModelConfig::from_json(base_config(), "cfg/config.json");
  EXPECT_EQ(c.num_layers, 8);
  EXPECT_EQ(c.num_linear_layers(), 6);
  EXPECT_EQ(c.rotary_dim, 8);
}

TEST(ModelConfig, ImpossibleValuesAreRefusedNamingTheKey) {
  struct Case {
    const char* key;
    json value;
    const char* expect;
  };
  const std::vector<Case> cases = {
      {"num_key_value_heads", 0, "'num_key_value_heads' is 0, allowed range [1, 4]"},
      {"num_key_value_heads", 8, "'num_key_value_heads' is 8, allowed range [1, 4]"},
      {"num_attention_heads", 0, "'num_attention_heads' is 0"},
      {"linear_num_key_heads", 0, "'linear_num_key_heads' is 0"},
      {"linear_num_value_heads", -4, "'linear_num_value_heads' is -4"},
      {"linear_key_head_dim", 0, "'linear_key_head_dim' is 0"},
      {"linear_value_head_dim", 0, "'linear_value_head_dim' is 0"},
      {"linear_conv_kernel_dim", 0, "'linear_conv_kernel_dim' is 0"},
      {"full_attention_interval", 0, "'full_attention_interval' is 0"},
      {"decoder_sparse_step", 0, "'decoder_sparse_step' is 0"},
      {"num_hidden_layers", 0, "'num_hidden_layers' is 0, allowed range [1, 4096]"},
      {"num_hidden_layers", -3, "'num_hidden_layers' is -3"},
      {"hidden_size", 0, "'hidden_size' is 0"},
      {"vocab_size", 0, "'vocab_size' is 0"},
      {"vocab_size", 4294967296LL, "'vocab_size' is 4294967296"},
      {"head_dim", 0, "'head_dim' is 0"},
      {"max_position_embeddings", -1, "'max_position_embeddings' is -1"},
      {"rms_norm_eps", -1e-6, "'rms_norm_eps' is -0.000001, allowed (0, 1)"},
      {"rms_norm_eps", 0, "'rms_norm_eps' is 0.000000, allowed (0, 1)"},
      {"rms_norm_eps", 1e-86, "allowed (0, 1) and above 1e-38"},  // 0 as a float (found by config_fuzz)
      {"rope_theta", 0, "'rope_theta' is 0.000000, it must be positive"},
      {"rope_theta", -10000.0, "'rope_theta' is -10000.000000, it must be positive"},
      {"partial_rotary_factor", 2.0, "'partial_rotary_factor' is 2.000000, allowed (0, 1]"},
      {"partial_rotary_factor", -0.5, "'partial_rotary_factor' is -0.500000"},
      {"num_experts", -1, "'num_experts' is -1"},
      {"moe_intermediate_size", 0, "'moe_intermediate_size' is 0"},
      {"intermediate_size", -128, "'intermediate_size' is -128"},
      {"num_experts_per_tok", 9, "num_experts_per_tok out of range"},
      {"hidden_size", 18446744073709551615ULL, "'hidden_size' is out of range"},
      {"mlp_only_layers", json::array({8}), "'mlp_only_layers' is 8, allowed range [0, 7]"},
      {"mlp_only_layers", json::array({"x"}), "mlp_only_layers holds a non-integer"},
      {"layer_types", json::array({json::array({json::array()})}), "unknown layer type (a JSON array)"},
      {"num_attention_heads", "4", "missing or non-integer 'num_attention_heads'"},
  };
  for (const auto& c : cases) {
    json j = base_config();
    j[c.key] = c.value;
    const std::string err = error_of(j);
    EXPECT_NE(err.find("cfg/config.json: "), std::string::npos) << c.key << ": " << err;
    EXPECT_NE(err.find(c.expect), std::string::npos) << c.key << " = " << c.value.dump() << ": " << err;
  }
}

TEST(ModelConfig, WrongJsonTypesInNestedSettingsAreModelErrors) {
  json j = base_config();
  j["rope_parameters"] = {{"rope_type", 7}};
  EXPECT_NE(error_of(j).find("cfg/config.json: "), std::string::npos) << error_of(j);
  json w = {{"model_type", "qwen3_5"}, {"text_config", {{"model_type", 5}}}};
  EXPECT_NE(error_of(w).find("cfg/config.json: "), std::string::npos) << error_of(w);
}

TEST(ModelConfig, ConfigMustBeARegularFile) {
  sdk::test::TempDir dir;
  ASSERT_EQ(mkfifo(dir.file("config.json").c_str(), 0600), 0);
  try {
    ModelConfig::load(dir.file("config.json"));
    FAIL() << "a FIFO was read";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("is a FIFO, not a regular file"), std::string::npos) << e.what();
  }
  EXPECT_THROW(ModelConfig::load("/dev/zero"), IoError);
  EXPECT_THROW(ModelConfig::load(dir.path.string()), IoError);
}


// ---- bailing_moe_linear (Ring-linear-2.0) ----

namespace ring {

json config() {
  return json::parse(R"({"model_type": "bailing_moe_linear", "hidden_size": 64, "intermediate_size": 128,
    "num_hidden_layers": 7, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 448,
    "max_position_embeddings": 4096, "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "partial_rotary_factor": 0.5,
    "rope_scaling": null, "use_qk_norm": true, "layer_group_size": 3, "group_norm_size": 2,
    "first_k_dense_replace": 1, "num_experts": 12, "num_experts_per_tok": 3, "num_shared_experts": 1,
    "moe_intermediate_size": 16, "moe_shared_expert_intermediate_size": 16, "n_group": 3, "topk_group": 2,
    "score_function": "sigmoid", "moe_router_enable_expert_bias": true, "routed_scaling_factor": 2.5,
    "norm_topk_prob": true})");
}

TEST(BailingMoeLinearConfig, LayerScheduleAndSettings) {
  const ModelConfig c = ModelConfig::from_json(config(), "cfg/config.json");
  // Attention where (i + 1) % group == 0 and on every layer past the last whole group.
  const std::vector<LayerKind> kinds = {LayerKind::LinearAttention, LayerKind::LinearAttention,
                                        LayerKind::FullAttention,   LayerKind::LinearAttention,
                                        LayerKind::LinearAttention, LayerKind::FullAttention,
                                        LayerKind::FullAttention};
  EXPECT_EQ(c.layer_kinds, kinds);
  EXPECT_EQ(c.layer_is_moe, (std::vector<bool>{false, true, true, true, true, true, true}));
  EXPECT_EQ(c.linear_kind, LinearKind::Lightning);
  EXPECT_TRUE(c.linear_rope);
  EXPECT_FALSE(c.zero_centred_norms);
  EXPECT_FALSE(c.attn_output_gate);
  EXPECT_EQ(c.lin_v_heads, 4);
  EXPECT_EQ(c.lin_k_dim, 16);
  EXPECT_EQ(c.rotary_dim, 8);
  EXPECT_EQ(c.lin_transfer_numel(), 4);  // one decay per head
  EXPECT_EQ(c.router, RouterKind::SigmoidGroupTopK);
  EXPECT_EQ(c.shared_expert_intermediate_size, 16);
  EXPECT_FALSE(c.shared_expert_gate);
  EXPECT_FLOAT_EQ(c.routed_scaling_factor, 2.5f);
}

TEST(BailingMoeLinearConfig, DecayFollowsTheOriginalLayerFactor) {
  const ModelConfig c = ModelConfig::from_json(config(), "cfg/config.json");
  // ALiBi slopes of 4 heads: 2^-2, 2^-4, 2^-6, 2^-8; layer factor 1 - (l - 1)/(L - 1) + 1e-5, l unclamped, so
  // layer 0 decays faster than layer 1 (mlx-lm's clamp would make them equal).
  for (int64_t l : {0, 1, 4}) {
    const std::vector<float> d = c.lightning_log_decay(l);
    ASSERT_EQ(d.size(), 4u);
    const double factor = 1.0 - (l - 1) / 6.0 + 1e-5;
    for (int h = 0; h < 4; ++h) EXPECT_NEAR(d[h], -std::pow(2.0, -2.0 * (h + 1)) * factor, 1e-7) << l << " " << h;
  }
  EXPECT_LT(c.lightning_log_decay(0)[0], c.lightning_log_decay(1)[0]);
}

TEST(BailingMoeLinearConfig, HeadCountNotAPowerOfTwo) {
  json j = config();
  j["num_attention_heads"] = 6;
  j["num_key_value_heads"] = 2;
  j["hidden_size"] = 96;
  j["group_norm_size"] = 3;
  const ModelConfig c = ModelConfig::from_json(j, "cfg/config.json");
  // slopes of 4 heads (2^-2 .. 2^-8), then every other slope of 8 heads (2^-1, 2^-3).
  const std::vector<double> s = {0.25, 0.0625, 0.015625, 0.00390625, 0.5, 0.125};
  const std::vector<float> d = c.lightning_log_decay(1);
  for (size_t h = 0; h < s.size(); ++h) EXPECT_NEAR(d[h], -s[h] * (1 + 1e-5), 1e-7) << h;
}

TEST(BailingMoeLinearConfig, UnsupportedSettingsAreRefusedNamingTheKey) {
  for (const char* key : {"use_qkv_bias", "use_bias", "linear_silu", "norm_head"}) {
    json j = config();
    j[key] = true;
    EXPECT_NE(error_of(j).find(key), std::string::npos) << key << ": " << error_of(j);
  }
  json j = config();
  j["score_function"] = "softmax";
  EXPECT_NE(error_of(j).find("score_function"), std::string::npos) << error_of(j);
  j = config();
  j["head_dim"] = 32;
  EXPECT_NE(error_of(j).find("head_dim"), std::string::npos) << error_of(j);
  j = config();
  j["n_group"] = 5;
  EXPECT_NE(error_of(j).find("n_group"), std::string::npos) << error_of(j);
  j = config();
  j.erase("layer_group_size");
  EXPECT_NE(error_of(j).find("layer_group_size"), std::string::npos) << error_of(j);
}

TEST(BailingMoeLinearConfig, TheCudaBackendTakesTheFamilyUpToItsKernelsHeadDim) {
  EXPECT_NO_THROW(ModelConfig::from_json(config(), "cfg/config.json").check_cuda_supported());
  EXPECT_NO_THROW(ModelConfig::from_json(base_config(), "cfg/config.json").check_cuda_supported());
  json j = config();
  j["head_dim"] = 160;  // lightning heads above the kernels' 128
  try {
    ModelConfig::from_json(j, "cfg/config.json").check_cuda_supported();
    FAIL() << "accepted";
  } catch (const ModelError& e) {
    EXPECT_NE(std::string(e.what()).find("bailing_moe_linear"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("160"), std::string::npos) << e.what();
  }
}

}  // namespace ring

// ---- minimax (MiniMax-Text-01 / M1, transformers layout) ----

TEST(MiniMaxConfig, ScheduleFactorsAndDecay) {
  json j = json::parse(R"({"model_type": "minimax", "hidden_size": 64, "intermediate_size": 32,
    "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 448,
    "rms_norm_eps": 1e-6, "num_local_experts": 8, "num_experts_per_tok": 2, "sliding_window": null,
    "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0}, "linear_attn_alpha_factor": 1.5,
    "linear_attn_beta_factor": 0.8, "full_attn_alpha_factor": 1.3, "mlp_beta_factor": 1.1})");
  const ModelConfig c = ModelConfig::from_json(j, "cfg/config.json");
  // transformers' default schedule without layer_types: even layers full attention, odd lightning.
  EXPECT_EQ(c.layer_kinds, (std::vector<LayerKind>{LayerKind::FullAttention, LayerKind::LinearAttention,
                                                   LayerKind::FullAttention, LayerKind::LinearAttention}));
  EXPECT_EQ(c.linear_kind, LinearKind::Lightning);
  EXPECT_EQ(c.lightning_style, LightningStyle::MiniMax);
  EXPECT_FALSE(c.linear_rope);
  EXPECT_TRUE(c.residual_from_norm);
  EXPECT_FLOAT_EQ(c.linear_alpha, 1.5f);
  EXPECT_FLOAT_EQ(c.full_beta, 1.0f);
  EXPECT_FLOAT_EQ(c.mlp_beta, 1.1f);
  EXPECT_EQ(c.rotary_dim, 16);
  EXPECT_EQ(c.moe_intermediate_size, 32);
  EXPECT_EQ(c.experts_per_tok, 2);
  // s_h = (2^(-8/H))^(h+1), factor 1 - l/(L - 1 + 1e-5) + 1e-5 (layer 0: no clamp question here).
  for (int64_t l : {0, 3}) {
    const std::vector<float> d = c.lightning_log_decay(l);
    const double factor = 1.0 - l / (3.0 + 1e-5) + 1e-5;
    for (int h = 0; h < 4; ++h) EXPECT_NEAR(d[h], -std::pow(0.25, h + 1.0) * factor, 1e-7) << l << " " << h;
  }
  EXPECT_NE(std::string(error_of(j)).find("accepted"), std::string::npos);
  j["sliding_window"] = 4096;
  EXPECT_NE(error_of(j).find("sliding_window"), std::string::npos) << error_of(j);
  j["sliding_window"] = nullptr;
  j["rope_parameters"]["partial_rotary_factor"] = 0.5;
  EXPECT_NE(error_of(j).find("partial_rotary_factor"), std::string::npos) << error_of(j);
  j["rope_parameters"].erase("partial_rotary_factor");
  EXPECT_NO_THROW(ModelConfig::from_json(j, "cfg/config.json").check_cuda_supported());
  EXPECT_FALSE(ModelConfig::from_json(j, "cfg/config.json").attn_qk_norm);
}

// ---- kimi_linear (Kimi-Linear, the released config layout) ----

json kimi_config() {
  return json::parse(R"({"model_type": "kimi_linear", "vocab_size": 448, "hidden_size": 64, "num_hidden_layers": 5,
    "rms_norm_eps": 1e-5, "model_max_length": 4096, "head_dim": 72, "rope_theta": 10000.0, "rope_scaling": null,
    "linear_attn_config": {"kda_layers": [1, 2, 4], "full_attn_layers": [3, 5], "num_heads": 4, "head_dim": 16,
                           "short_conv_kernel_size": 4},
    "num_attention_heads": 4, "num_key_value_heads": 4, "kv_lora_rank": 32, "q_lora_rank": null,
    "qk_nope_head_dim": 16, "qk_rope_head_dim": 8, "v_head_dim": 16, "mla_use_nope": true,
    "first_k_dense_replace": 1, "intermediate_size": 128, "moe_intermediate_size": 32, "num_experts": 8,
    "num_experts_per_token": 2, "num_shared_experts": 1, "num_expert_group": 2, "topk_group": 1,
    "moe_renormalize": true, "moe_router_activation_func": "sigmoid", "routed_scaling_factor": 2.446})");
}

TEST(KimiLinearConfig, ReleasedLayout) {
  const ModelConfig c = ModelConfig::from_json(kimi_config(), "cfg/config.json");
  using K = LayerKind;
  EXPECT_EQ(c.layer_kinds, (std::vector<K>{K::LinearAttention, K::LinearAttention, K::FullAttention,
                                           K::LinearAttention, K::FullAttention}));  // 1-based lists
  EXPECT_EQ(c.layer_is_moe, (std::vector<bool>{false, true, true, true, true}));
  EXPECT_EQ(c.linear_kind, LinearKind::Kda);
  EXPECT_EQ(c.lin_k_heads, 4);
  EXPECT_EQ(c.lin_v_dim, 16);
  EXPECT_EQ(c.lin_conv_dim(), 3 * 64);  // q | k | v, each with its own conv
  EXPECT_EQ(c.lin_transfer_numel(), 4 * 16 * 16);  // dense
  EXPECT_TRUE(c.mla);
  EXPECT_EQ(c.head_dim, 24);  // nope + rope; the config's head_dim is not MLA's
  EXPECT_EQ(c.v_head_dim, 16);
  EXPECT_EQ(c.rotary_dim, 0);  // no RoPE anywhere
  EXPECT_EQ(c.num_kv_heads, 4);
  EXPECT_EQ(c.max_positions, 4096);
  EXPECT_EQ(c.router, RouterKind::SigmoidGroupTopK);
  EXPECT_TRUE(c.router_mask_inf);
  EXPECT_EQ(c.n_group, 2);
  EXPECT_EQ(c.experts_per_tok, 2);
  EXPECT_EQ(c.shared_expert_intermediate_size, 32);
  EXPECT_FALSE(c.shared_expert_gate);
  EXPECT_FLOAT_EQ(c.routed_scaling_factor, 2.446f);
  EXPECT_FALSE(c.zero_centred_norms);
  EXPECT_NO_THROW(c.check_cuda_supported());
  // transformers' names for the same settings give the same config.
  json t = kimi_config();
  t.erase("linear_attn_config");
  t["layer_types"] = {"linear_attention", "linear_attention", "full_attention", "linear_attention", "full_attention"};
  t["linear_num_heads"] = 4;
  t["linear_head_dim"] = 16;
  t["mlp_layer_types"] = {"dense", "sparse", "sparse", "sparse", "sparse"};
  for (auto [from, to] : {std::pair{"num_experts", "num_local_experts"}, {"num_experts_per_token", "num_experts_per_tok"},
                          {"num_expert_group", "n_group"}}) {
    t[to] = t[from];
    t.erase(from);
  }
  EXPECT_EQ(ModelConfig::from_json(t, "cfg/config.json").fingerprint, c.fingerprint);
}

TEST(KimiLinearConfig, BadValuesNameTheKey) {
  auto err = [](const std::function<void(json&)>& edit) {
    json j = kimi_config();
    edit(j);
    return error_of(j);
  };
  const std::vector<std::pair<std::function<void(json&)>, std::string>> cases = {
      {[](json& j) { j["linear_attn_config"]["num_heads"] = 0; }, "linear_attn_config.num_heads"},
      {[](json& j) { j["linear_attn_config"]["head_dim"] = -3; }, "linear_attn_config.head_dim"},
      {[](json& j) { j["linear_attn_config"]["short_conv_kernel_size"] = 0; }, "short_conv_kernel_size"},
      {[](json& j) { j["linear_attn_config"]["kda_layers"] = {1, 2, 6}; }, "kda_layers"},
      {[](json& j) { j["linear_attn_config"]["full_attn_layers"] = {3, 4}; }, "listed twice"},
      {[](json& j) { j["linear_attn_config"]["full_attn_layers"] = {3}; }, "layer 5"},
      {[](json& j) { j["kv_lora_rank"] = 0; }, "kv_lora_rank"},
      {[](json& j) { j["qk_nope_head_dim"] = 0; }, "qk_nope_head_dim"},
      {[](json& j) { j["v_head_dim"] = 25; }, "v_head_dim"},
      {[](json& j) { j["q_lora_rank"] = 16; }, "q_lora_rank"},
      {[](json& j) { j["mla_use_nope"] = false; }, "mla_use_nope"},
      {[](json& j) { j["num_key_value_heads"] = 2; }, "num_key_value_heads"},
      {[](json& j) { j["num_experts_per_token"] = 9; }, "num_experts_per_token"},
      {[](json& j) { j["num_expert_group"] = 3; }, "num_expert_group"},
      {[](json& j) { j["topk_group"] = 3; }, "topk_group"},
      {[](json& j) { j["routed_scaling_factor"] = -1.0; }, "routed_scaling_factor"},
      {[](json& j) { j["moe_router_activation_func"] = "softmax"; }, "moe_router_activation_func"},
      {[](json& j) { j["model_max_length"] = -1; }, "model_max_length"},
      {[](json& j) { j.erase("intermediate_size"); }, "intermediate_size"},
      {[](json& j) { j["attention_bias"] = true; }, "attention_bias"},
  };
  for (const auto& [edit, key] : cases) {
    const std::string e = err(edit);
    EXPECT_NE(e.find("cfg/config.json"), std::string::npos) << key << ": " << e;
    EXPECT_NE(e.find(key), std::string::npos) << key << ": " << e;
  }
}

// ---- bailing_hybrid (Ring-2.5, as transformers reads its config) ----

TEST(BailingHybridConfig, ScheduleRopeAndGates) {
  json j = json::parse(R"({"model_type": "bailing_hybrid", "vocab_size": 448, "hidden_size": 64,
    "num_hidden_layers": 6, "rms_norm_eps": 1e-6, "model_max_length": 4096, "num_attention_heads": 4,
    "num_key_value_heads": 4, "head_dim": 16, "short_conv_kernel_size": 4, "layer_group_size": 3,
    "kda_safe_gate": true, "kda_lower_bound": -5.0, "kv_lora_rank": 32, "q_lora_rank": null,
    "qk_nope_head_dim": 16, "qk_rope_head_dim": 8, "v_head_dim": 16, "rope_theta": 10000.0,
    "first_k_dense_replace": 1, "intermediate_size": 128, "moe_intermediate_size": 32, "num_experts": 8,
    "num_experts_per_token": 2, "num_shared_experts": 1, "num_expert_group": 2, "topk_group": 1,
    "moe_renormalize": true, "routed_scaling_factor": 2.5})");
  const ModelConfig c = ModelConfig::from_json(j, "cfg/config.json");
  using K = LayerKind;
  EXPECT_EQ(c.layer_kinds, (std::vector<K>{K::LinearAttention, K::LinearAttention, K::FullAttention,
                                           K::LinearAttention, K::LinearAttention, K::FullAttention}));
  EXPECT_EQ(c.linear_kind, LinearKind::Kda);
  EXPECT_EQ(c.lin_k_heads, 4);
  EXPECT_EQ(c.lin_k_dim, 16);  // head_dim is the KDA head dim here
  EXPECT_EQ(c.head_dim, 24);
  EXPECT_EQ(c.rotary_dim, 8);  // RoPE on MLA's rope part only
  EXPECT_DOUBLE_EQ(c.rope_theta, 10000.0);
  EXPECT_TRUE(c.mla_head_gate);
  EXPECT_FALSE(c.kda_low_rank_gates);
  EXPECT_FLOAT_EQ(c.kda_gate_lower_bound, -5.0f);
  EXPECT_EQ(c.n_group, 2);
  EXPECT_TRUE(c.router_mask_inf);
  json u = j;
  u["kda_safe_gate"] = false;
  EXPECT_FLOAT_EQ(ModelConfig::from_json(u, "cfg/config.json").kda_gate_lower_bound, 0.0f);  // softplus gate
  EXPECT_NO_THROW(c.check_cuda_supported());
  for (const auto& [edit, key] : std::vector<std::pair<std::function<void(json&)>, std::string>>{
           {[](json& x) { x["qk_rope_head_dim"] = 7; }, "qk_rope_head_dim"},
           {[](json& x) { x["qk_rope_head_dim"] = 0; }, "qk_rope_head_dim"},
           {[](json& x) { x["kda_lower_bound"] = 1.0; }, "kda_lower_bound"},
           {[](json& x) { x["layer_group_size"] = 0; }, "layer_group_size"},
           {[](json& x) { x["head_dim"] = 0; }, "head_dim"},
           {[](json& x) { x["short_conv_kernel_size"] = 0; }, "short_conv_kernel_size"},
           {[](json& x) { x["rope_parameters"] = {{"rope_type", "yarn"}, {"factor", 4.0}}; }, "rope_type"},
           {[](json& x) { x["rope_theta"] = -1.0; }, "rope_theta"},
       }) {
    json x = j;
    edit(x);
    const std::string e = error_of(x);
    EXPECT_NE(e.find("cfg/config.json"), std::string::npos) << key << ": " << e;
    EXPECT_NE(e.find(key), std::string::npos) << key << ": " << e;
  }
}
}  // namespace
}  // namespace hypic

namespace hypic {
namespace {

// The benches' production shapes (tools/bench/configs): each parses as the family it names and fits the
// CUDA kernels (hypic_bench_model and hypic_bench_ttft run them with random weights on the H200).
TEST(BenchConfigs, EveryConfigLoadsAndRunsOnCuda) {
  const std::string dir = std::string(HYPIC_SOURCE_DIR) + "/tools/bench/configs/";
  const std::vector<std::pair<std::string, std::string>> want = {
      {"qwen3_5_35b_a3b.json", "qwen3_5_moe_text"},      {"ring_mini_linear_2_0.json", "bailing_moe_linear"},
      {"minimax_text_01_8_layers.json", "minimax"},      {"kimi_linear_48b_a3b.json", "kimi_linear"},
      {"bailing_hybrid_48b_shape.json", "bailing_hybrid"}};
  for (const auto& [file, family] : want) {
    const ModelConfig c = ModelConfig::load(dir + file);
    EXPECT_EQ(c.text_model_type, family) << file;
    EXPECT_NO_THROW(c.check_cuda_supported()) << file;
    EXPECT_GT(c.num_linear_layers(), 0) << file;
    EXPECT_LT(c.num_linear_layers(), c.num_layers) << file;  // hybrid: some full attention
  }
}

}  // namespace
}  // namespace hypic
