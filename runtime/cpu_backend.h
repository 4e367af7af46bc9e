// The CPU backend (fp32 compute; F32/BF16/F16 weights): the reference every other backend is checked
// against. The hybrid decoders' layers as backend steps: embeddings, RMSNorm (zero-centred for Qwen),
// Gated DeltaNet (Qwen3-Next / Qwen3.5), lightning (Ring, MiniMax) or KDA (Kimi, Ring-2.5) linear mixers,
// full-attention (or MLA) mixers, dense
// SwiGLU or sparse MoE with shared expert, final norm and LM head. Sequence states are SequenceState
// (runtime/sequence_state.h).
#pragma once
#include <functional>
#include <memory>
#include <string>

#include "runtime/backend.h"
#include "runtime/model_config.h"
#include "runtime/communicator.h"
#include "runtime/model_weights.h"
#include "runtime/sequence_state.h"

namespace hypic {

class CpuBackend : public Backend {
 public:
  // Loads config.json and the safetensors weights from `dir`; errors name the file and tensor.
  static std::unique_ptr<CpuBackend> load(const std::string& dir);
  CpuBackend(ModelConfig cfg, ModelWeights w) : cfg_(std::move(cfg)), w_(std::move(w)) {}

  const ModelWeights& weights() const { return w_; }

  Device device() const override { return Device::Cpu; }
  const ModelConfig& config() const override { return cfg_; }
  const std::string& fingerprint() const override { return w_.fingerprint; }
  DType kv_dtype() const override { return DType::F32; }

  std::unique_ptr<Memory> allocate(size_t bytes) override;
  // A CpuBackend over the same mapped weights.
  std::unique_ptr<Backend> worker() override { return std::make_unique<CpuBackend>(cfg_, w_); }
  bool shares_memory_with(const Backend& other) const override { return other.device() == Device::Cpu; }
  std::unique_ptr<State> new_state() override;
  std::unique_ptr<State> clone(const State& s) override;
  void reset(State& s) override;

  std::unique_ptr<Rows> rows(int64_t T) override;
  void embed(std::span<const int> ids, std::span<const int64_t> pos, Rows& r) override;
  void input_norm(int layer, Rows& r) override;
  void post_norm(int layer, Rows& r) override;
  void linear_project(int layer, Rows& r) override;
  void linear_recur(int layer, Rows& r, int64_t row0, int64_t n, State& st, float* transfer) override;
  void linear_body(int layer, Rows& r, int64_t row0, int64_t n, State& st, float* T, float* body) override;
  void linear_output(int layer, Rows& r) override;
  void attention_project(int layer, Rows& r) override;
  void attention_core(int layer, Rows& r, int64_t row0, int64_t n, State& st) override;
  void attention_output(int layer, Rows& r) override;
  void ffn(int layer, Rows& r) override;
  std::vector<float> logits(Rows& r, std::span<const int64_t> rows) override;

  void save_linear(int layer, const State& st, float* S, void* conv_tail) override;
  void load_linear(int layer, State& st, const float* S, const void* conv_tail) override;
  void compose_linear(int layer, State& st, const float* T, const float* body, Composition how,
                      int64_t rotate) override;
  void empty_body(float* T, float* body) override;
  void shift_linear_state(float* S, int64_t delta) override;
  void append_kv(int layer, State& st, const void* k, const void* v, int64_t n, std::span<const int64_t> pos,
                 int64_t rotate) override;
  void save_kv(int layer, const State& st, int64_t row, int64_t n, void* k, void* v, int64_t at,
               int64_t rotate) override;
  int64_t kv_rows(int layer, const State& st) const override;
  std::unique_ptr<SequenceState> to_host(const State& s) override;
  std::vector<float> to_host(const void* data, size_t n, DType t) override;
  void copy_to_host(const void* src, void* host_dst, size_t bytes) override;
  void copy_from_host(const void* host_src, void* dst, size_t bytes) override;
  void set_communicator(std::shared_ptr<Communicator> comm) override;

 private:
  // A sublayer's output step under tensor parallelism: `step` accumulates onto zeros (this rank's partial
  // output), the partials are summed over the group, and the sum joins the residual stream.
  void reduce_into_residual(Rows& r, const std::function<void()>& step);
  void linear_output_local(int layer, Rows& r);
  void attention_output_local(int layer, Rows& r);
  void ffn_local(int layer, Rows& r);
  void lightning_project(int layer, Rows& r);
  void lightning_recur(int layer, Rows& r, int64_t row0, int64_t n, State& st, float* transfer);
  void lightning_output(int layer, Rows& r);
  void kda_project(int layer, Rows& r);
  void kda_output(int layer, Rows& r);
  void mla_project(int layer, Rows& r);
  void route_group_topk(const MoeWeights& M, const float* logits, int64_t T,
                        std::vector<std::vector<std::pair<int64_t, float>>>& by_expert) const;
  void mlp(const MlpWeights& m, int64_t I, const float* x, int64_t T, float* out, bool accumulate) const;

  ModelConfig cfg_;
  ModelWeights w_;
  std::shared_ptr<Communicator> comm_;  // set: this backend is one rank of a tensor-parallel group
  std::vector<float> tp_partial_;       // reduce_into_residual's partial output
};

}  // namespace hypic
