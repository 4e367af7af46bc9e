// The Qwen3-Next / Qwen3.5 hybrid decoder on one CUDA device: the same forward pass as HybridModel
// (runtime/hybrid_model.h) with bf16 weights and activations, fp32 accumulation, an fp32 residual
// stream, fp32 recurrent states and a bf16 KV cache (kernels/cuda).
//
// forward() runs a plain sequence: prefill, multi-token continuation and 1-token decode are the same
// call. A CudaModel owns its stream, cuBLAS handles and scratch pool; forward() is not thread-safe (one
// caller at a time per model), while sequence states are independent of each other.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "kernels/cuda/gemm.h"
#include "kernels/cuda/memory.h"
#include "runtime/cuda/cuda_sequence_state.h"
#include "runtime/cuda/device_weights.h"
#include "runtime/model_config.h"
#include "runtime/model_weights.h"

namespace hypic {

class CudaModel {
 public:
  // Loads config.json and the safetensors weights from `dir` (the CPU loader's checks and errors) and
  // uploads them once; the host mapping is released afterwards.
  static std::unique_ptr<CudaModel> load(const std::string& dir);
  // Uploads already loaded weights (converted to bf16 on the device).
  static std::unique_ptr<CudaModel> upload(const ModelConfig& cfg, const ModelWeights& w);
  // A model of cfg's shape with random weights generated on the device (DeviceWeights::random), for
  // timing production shapes without a checkpoint.
  static std::unique_ptr<CudaModel> random(const ModelConfig& cfg, uint64_t seed);
  ~CudaModel();

  const ModelConfig& config() const { return cfg_; }
  const std::string& fingerprint() const { return fingerprint_; }
  size_t weight_bytes() const { return w_.bytes(); }
  CudaSequenceState new_state() const { return CudaSequenceState::empty_for(cfg_); }

  // Runs `ids` at positions state.length, state.length + 1, ... and advances the state.
  // Returns the logits of the last token ([V]), or of every token ([T, V]) when all_logits.
  // Throws InvalidArgument for no tokens or an id outside [0, vocab).
  std::vector<float> forward(std::span<const int> ids, CudaSequenceState& state, bool all_logits = false);

 private:
  struct Scratch;
  CudaModel(ModelConfig cfg, std::string fingerprint);

  void linear_mixer(int layer, int64_t T, CudaLinearLayerState& st, Scratch& s);
  void attention_mixer(int layer, int64_t T, CudaAttentionLayerState& kv, Scratch& s);
  void ffn(int layer, int64_t T, Scratch& s);
  // y = x W^T into a bf16 or fp32 buffer (rows of x `ldx` apart).
  void gemm(const cuda::bf16* x, int64_t T, int64_t ldx, const DeviceLinear& w, void* y, DType yt,
            bool accumulate = false);

  ModelConfig cfg_;
  std::string fingerprint_;
  cuda::Stream stream_;
  cuda::Blas blas_;
  cuda::DevicePool pool_;  // per-forward scratch, reused across calls
  DeviceWeights w_;
  std::vector<int32_t> counts_host_;  // MoE group sizes (host)
};

}  // namespace hypic
