// config.json values outside their allowed ranges: each is refused with a ModelError naming the file
// and the key (several used to divide by zero or run and print garbage).
#include <sys/stat.h>

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace hypic
