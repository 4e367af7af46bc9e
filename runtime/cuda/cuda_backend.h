// The CUDA backend: the engine's layer steps on one device through CudaModel (bf16 weights and
// activations, fp32 residual stream and recurrent states, bf16 KV rows and conv tails), cache entries in
// device memory (one cudaMalloc block per entry), and the graph-replayed one-token decode step. Work is
// ordered on the model's stream; one caller at a time.
#pragma once
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "runtime/backend.h"
#include "runtime/cuda/cuda_model.h"
#include "runtime/cuda/cuda_sequence_state.h"
#include "runtime/cuda/device_memory.h"
#include "runtime/cuda/pinned_memory.h"
#include "kernels/cuda/memory.h"

namespace hypic {

class CudaBackend : public Backend {
 public:
  explicit CudaBackend(std::unique_ptr<CudaModel> model);
  ~CudaBackend() override;
  // Loads config.json and the safetensors weights from `dir` and uploads them (CudaModel::load).
  static std::unique_ptr<CudaBackend> load(const std::string& dir);
  // A model of cfg's shape with random weights generated on the device (timing without a checkpoint).
  static std::unique_ptr<CudaBackend> random(const ModelConfig& cfg, uint64_t seed);

  CudaModel& model() { return *m_; }

  Device device() const override { return Device::Cuda; }
  const ModelConfig& config() const override { return m_->config(); }
  const std::string& fingerprint() const override { return m_->fingerprint(); }
  DType kv_dtype() const override { return DType::BF16; }

  std::unique_ptr<Memory> allocate(size_t bytes) override;
  // A CudaBackend over a sibling model (CudaModel::sibling: the same device weights, its own stream).
  std::unique_ptr<Backend> worker() override;
  bool shares_memory_with(const Backend& other) const override;
  void copy_shared(const void* src, void* dst, size_t bytes) override;
  bool copy_from_peer(const Backend& from, const void* src, void* dst, size_t bytes) override;
  // NcclCommunicator: bound to the model's stream; another communicator (StagedCommunicator) is called
  // from the host between the steps.
  void set_communicator(std::shared_ptr<Communicator> comm) override;
  void bind_thread() override;
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
  void linear_isolated(int layer, Rows& r, std::span<const IsolatedBlock> items) override;
  void linear_chain(int layer, Rows& r, State& st, std::span<const ChainStep> steps, Composition how) override;
  void linear_output(int layer, Rows& r) override;
  void attention_project(int layer, Rows& r) override;
  void attention_core(int layer, Rows& r, int64_t row0, int64_t n, State& st) override;
  void attention_output(int layer, Rows& r) override;
  void ffn(int layer, Rows& r) override;
  std::vector<float> logits(Rows& r, std::span<const int64_t> rows) override;
  std::vector<float> decode_step(int id, State& st) override;
  std::vector<float> decode_batch(std::span<State* const> states, std::span<const int> ids) override;
  bool decode_batch_drawn(std::span<State* const> states, std::span<const int> ids,
                          std::span<const TokenDraw* const> draws, std::span<int> sampled,
                          std::vector<std::vector<float>>& logits) override;

  void save_linear(int layer, const State& st, float* S, void* conv_tail) override;
  void load_linear(int layer, State& st, const float* S, const void* conv_tail) override;
  void load_linear_layers(State& st, std::span<const LinearLoad> items) override;
  void compose_linear(int layer, State& st, const float* T, const float* body, Composition how,
                      int64_t rotate) override;
  void empty_body(float* T, float* body) override;
  void shift_linear_state(float* S, int64_t delta) override;
  void append_kv(int layer, State& st, const void* k, const void* v, int64_t n, std::span<const int64_t> pos,
                 int64_t rotate) override;
  void append_kv_ranges(int layer, State& st, std::span<const KvAppend> items) override;
  void save_kv_ranges(int layer, const State& st, std::span<const KvSave> items) override;
  void attention_isolated(int layer, Rows& r, std::span<const IsolatedAttention> items) override;
  void save_kv(int layer, const State& st, int64_t row, int64_t n, void* k, void* v, int64_t at,
               int64_t rotate) override;
  int64_t kv_rows(int layer, const State& st) const override;
  void reserve_kv(State& st, int64_t rows) override;
  void sync() override;
  void prepare_memory(size_t bytes) override;
  void set_split_invariant(bool on) override;
  std::unique_ptr<SequenceState> to_host(const State& s) override;
  std::vector<float> to_host(const void* data, size_t n, DType t) override;
  void copy_to_host(const void* src, void* host_dst, size_t bytes) override;
  void copy_from_host(const void* host_src, void* dst, size_t bytes) override;
  // Records below the device: pinned host memory, and promotion by one asynchronous copy of the packed
  // record on a copy stream and an expansion kernel on the model's stream (kernels/cuda/packed_expand.h).
  std::unique_ptr<Memory> allocate_host(size_t bytes) override;
  bool records_on_device() const override { return true; }
  void expand_from_host(std::shared_ptr<const void> keep, const char* packed, size_t bytes,
                        std::span<const ExpandPiece> pieces) override;
  void pack_to_host(std::span<const PackPiece> pieces, char* packed, size_t bytes) override;
  std::vector<float> head_max_abs(const float* x, size_t heads, size_t per_head) override;

 private:
  std::unique_ptr<CudaModel> m_;
  DeviceMemory scratch_;  // one state: the product T S before it replaces S
  std::shared_ptr<PinnedPool> pinned_;
  cuda::Stream copy_;  // host-to-device copies of records, overlapping the model stream's work
  cuda::Event copied_{false};
  std::mutex keep_mu_;
  std::vector<std::shared_ptr<const void>> keep_;  // host buffers of copies not yet known complete
};

// The CUDA state behind a State handle (asserts that it is one).
CudaSequenceState& cuda_state(State& s);
const CudaSequenceState& cuda_state(const State& s);

}  // namespace hypic
