// The Qwen3-Next / Qwen3.5 hybrid decoder on the CPU (fp32 compute, F32/BF16/F16 weights):
// embeddings, zero-centred RMSNorm, Gated DeltaNet and gated full-attention mixers, dense SwiGLU or
// sparse MoE with shared expert, final norm and LM head.
//
// forward() runs a plain sequence (prefill, continuation, decode: all the same call). The per-layer
// pieces are public because the caching engine drives its own layer loop over selected tokens.
#pragma once
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "runtime/model_config.h"
#include "runtime/model_weights.h"
#include "runtime/sequence_state.h"

namespace hypic {

class HybridModel {
 public:
  // Loads config.json and the safetensors weights from `dir`; errors name the file and tensor.
  static std::unique_ptr<HybridModel> load(const std::string& dir);

  const ModelConfig& config() const { return cfg_; }
  const std::string& fingerprint() const { return w_.fingerprint; }
  SequenceState new_state() const { return SequenceState::empty_for(cfg_); }

  // Runs `ids` at positions state.length, state.length + 1, ... and advances the state.
  // Returns the logits of the last token ([V]), or of every token ([T, V]) when all_logits.
  std::vector<float> forward(std::span<const int> ids, SequenceState& state, bool all_logits = false) const;

  // ---- building blocks (rows are tokens; D = hidden size) ----
  // Throws InvalidArgument for an id outside [0, vocab).
  void embed(std::span<const int> ids, float* h) const;
  void input_norm(int layer, const float* h, int64_t T, float* x) const;
  void post_norm(int layer, const float* h, int64_t T, float* x) const;
  // Gated DeltaNet over T tokens continuing `st`. If `transfer` is non-null ([Hv, dk, dk], holding an
  // operator), it is left-multiplied by the transition of these T tokens (DESIGN §1.2).
  void linear_mixer(int layer, const float* x, int64_t T, LinearLayerState& st, float* out,
                    float* transfer = nullptr) const;
  // Computes K/V of the T tokens at `pos`, appends them to `kv`, and attends over every row of `kv`
  // visible by position.
  void attention_mixer(int layer, const float* x, int64_t T, const int64_t* pos, AttentionLayerState& kv,
                       float* out) const;
  void ffn(int layer, const float* x, int64_t T, float* out) const;
  // Final norm + LM head: h [T, D] -> logits [T, V].
  void logits(const float* h, int64_t T, float* out) const;

 private:
  HybridModel(ModelConfig cfg, ModelWeights w) : cfg_(std::move(cfg)), w_(std::move(w)) {}
  void mlp(const MlpWeights& m, int64_t I, const float* x, int64_t T, float* out, bool accumulate) const;

  ModelConfig cfg_;
  ModelWeights w_;
};

}  // namespace hypic
