// config.json -> ModelConfig: any bytes either give a config whose sizes are in range or a typed error.
#include <nlohmann/json.hpp>

#include "runtime/error.h"
#include "runtime/model_config.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const nlohmann::json j = nlohmann::json::parse(hypic::fuzz::as_text(data, size), nullptr, false);
  if (j.is_discarded()) return 0;
  try {
    const hypic::ModelConfig c = hypic::ModelConfig::from_json(j, "config.json");
    // What the forward pass relies on (divisions, per-layer tables) must hold for any accepted config.
    if (c.num_layers <= 0 || c.num_kv_heads <= 0 || c.num_heads % c.num_kv_heads != 0 || c.lin_k_heads <= 0 ||
        c.lin_v_heads % c.lin_k_heads != 0 || c.rotary_dim <= 0 || c.rotary_dim > c.head_dim ||
        static_cast<int64_t>(c.layer_kinds.size()) != c.num_layers ||
        static_cast<int64_t>(c.layer_is_moe.size()) != c.num_layers || !(c.rms_norm_eps > 0) || !(c.rope_theta > 0))
      __builtin_trap();
  } catch (const hypic::Error&) {
  }
  return 0;
}
