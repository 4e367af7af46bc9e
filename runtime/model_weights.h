// The weights of a hybrid model, checked against its config: every tensor present with the expected
// shape (errors name the tensor). Large matrices stay views into the memory-mapped checkpoint in their
// stored type; small vectors (norms, gates) are converted to fp32.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "runtime/model_config.h"
#include "runtime/safetensors.h"

namespace hypic {

// A row-major [out, in] weight matrix used as y = x W^T.
struct Linear {
  const void* data = nullptr;
  DType dtype = DType::F32;
  int64_t out = 0, in = 0;
};

struct GatedDeltaNetWeights {
  Linear in_qkv;   // [2*key_dim + value_dim, D], rows in conv-channel order q | k | v
  Linear in_z;     // [value_dim, D]
  Linear in_b;     // [Hv, D]
  Linear in_a;     // [Hv, D]
  Linear out;      // [D, value_dim]
  std::vector<float> conv_w;   // [conv_dim, K]
  std::vector<float> A_log;    // [Hv]
  std::vector<float> dt_bias;  // [Hv]
  std::vector<float> norm_w;   // [dv]
};

// Lightning attention (Ring, MiniMax): q | k | v from one fused projection, q/k RMSNorm (Ring), RMSNorm
// of the output in groups, sigmoid gate.
struct LightningWeights {
  Linear qkv;    // [3 * H * hd, D], rows q | k | v (MiniMax's per-head interleaved rows re-ordered to this)
  Linear gate;   // Ring g_proj / MiniMax output_gate [H * hd, D]
  Linear out;    // Ring dense / MiniMax out_proj [D, H * hd]
  std::vector<float> q_norm, k_norm;  // [hd] (Ring only)
  std::vector<float> g_norm;          // [H * hd] Ring g_norm / MiniMax norm
  std::vector<float> log_decay;       // [H] log(lambda_h) of this layer (from the config, no tensor)
};

// Kimi Delta Attention: q, k, v projections each through its own short causal conv (one conv over the
// channels q | k | v here), a low-rank per-channel forget gate, beta, a low-rank output gate.
struct KdaWeights {
  Linear q, k, v;                      // [H * dk, D] each
  Linear f_a, f_b;                     // [dk, D], [H * dk, dk]: forget-gate input f = f_b(f_a h) (Ring-2.5:
                                       // f_a empty, f_b = f_proj [H * dk, D])
  Linear b;                            // [H, D]
  Linear g_a, g_b;                     // [dk, D], [H * dk, dk]: output gate input (Ring-2.5: g_a empty,
                                       // g_b = g_proj [H * dk, D])
  Linear out;                          // [D, H * dk]
  std::vector<float> conv_w;           // [3 * H * dk, K], channels q | k | v
  std::vector<float> A_log;            // [H]
  std::vector<float> dt_bias;          // [H * dk]
  std::vector<float> o_norm;           // [dk]
};

// Multi-head latent attention without RoPE (Kimi): q = q_proj h (AttentionWeights::q, [H * (nope + rope), D]);
// [c | k_rope] = kv_a h; c normed; [k_nope | v] per head = kv_b c; o_proj is AttentionWeights::o.
struct MlaWeights {
  Linear kv_a;                  // [kv_lora_rank + qk_rope_dim, D]
  std::vector<float> kv_norm;   // [kv_lora_rank]
  Linear kv_b;                  // [H * (qk_nope_dim + v_head_dim), kv_lora_rank]
  Linear head_gate;             // [H, D] Ring-2.5's per-head output gate (empty for Kimi)
};

struct AttentionWeights {
  Linear q;  // [H * hd * (gate ? 2 : 1), D]; per head: query then gate
  Linear k;  // [Hkv * hd, D]
  Linear v;  // [Hkv * hd, D]
  Linear o;  // [D, H * hd]
  std::vector<float> q_norm, k_norm;  // [hd] (empty: no q/k norm, MiniMax)
};

struct MlpWeights {
  Linear gate, up;  // [I, D]
  Linear down;      // [D, I]
};

struct MoeWeights {
  Linear router;  // [E, D]
  std::vector<float> expert_bias;  // [E] (SigmoidGroupTopK routers: added to the scores for the choice only;
                                   // Ring's expert_bias, Kimi's e_score_correction_bias)
  std::vector<MlpWeights> experts;
  bool has_shared = false;
  MlpWeights shared;
  Linear shared_gate;  // [1, D]
};

struct LayerWeights {
  LayerKind kind;
  bool moe = false;
  std::vector<float> input_norm, post_norm;  // [D]
  GatedDeltaNetWeights lin;
  LightningWeights lightning;
  KdaWeights kda;
  AttentionWeights attn;
  MlaWeights mla;
  MlpWeights mlp;
  MoeWeights moe_w;
};

struct ModelWeights {
  Checkpoint checkpoint;  // keeps the mappings alive
  Linear embed;           // [V, D]
  Linear lm_head;         // [V, D] (the embedding when tied)
  std::vector<float> final_norm;
  std::vector<LayerWeights> layers;
  std::vector<std::shared_ptr<std::vector<char>>> owned;  // re-ordered copies (grouped projections)
  std::string fingerprint;  // identifies these exact weights

  static ModelWeights load(const ModelConfig& cfg, const std::string& dir);
};

}  // namespace hypic
