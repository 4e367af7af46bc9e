// Tensor parallelism (docs/engine.md, "Tensor parallelism"): a model split over R ranks, Megatron-style.
// Rank r holds, of every layer, the r-th R-th of the attention's query and key/value heads, of the Gated
// DeltaNet's key and value heads (with their transfer operators and states: a head's state lives with its
// head), and of every feed-forward's intermediate width (the dense MLP, each routed expert and the shared
// expert); the output projections take the matching columns, so each rank's sublayer output is a partial
// sum, and one all-reduce per mixer and per feed-forward adds them before they join the residual stream
// (Backend::set_communicator). Embedding, norms, router and LM head are replicated, so every rank
// computes the same logits.
//
// An engine per rank runs the same plan (TensorParallelEngine): the ranks' segment stores hold the
// rank's slices of the same entries, their sizes are equal across ranks, so with one budget they keep
// and evict the same entries. Covered: the Qwen3-Next / Qwen3.5 layers (dense and MoE).
#pragma once
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "runtime/backend.h"
#include "runtime/communicator.h"
#include "runtime/engine.h"
#include "runtime/model_config.h"
#include "runtime/model_weights.h"

namespace hypic {

// InvalidArgument, naming the count, unless every split of `cfg` divides by `ranks` and the family is covered.
void check_tensor_parallel(const ModelConfig& cfg, int ranks);
// Rank `rank`'s config: the per-rank head counts and intermediate widths (fingerprint marked with the rank).
ModelConfig shard_config(const ModelConfig& cfg, int rank, int ranks);
// Rank `rank`'s weights: row slices are views into `w` (which must outlive the result unless it holds the
// checkpoint mapping, which the result shares), column slices are copies.
ModelWeights shard_weights(const ModelConfig& cfg, const ModelWeights& w, int rank, int ranks);

// R rank backends with their communicators: CPU ranks over threads (ThreadCommunicator), or in CUDA builds
// rank r on CUDA device cuda_devices[r] (default 0..R-1): NCCL (NcclCommunicator) when the devices are
// distinct, else the ranks share devices through host staging (StagedCommunicator: slow, for checking
// the tensor-parallel path on one GPU).
class TensorParallelGroup {
 public:
  // Loads the model directory once and builds the ranks' slices. InvalidArgument for ranks < 1, a model
  // that does not split (check_tensor_parallel), a device list of another length, or a missing device.
  static std::unique_ptr<TensorParallelGroup> open(const std::string& dir, int ranks, Device device,
                                                   std::vector<int> cuda_devices = {});
  // Random weights of cfg's per-rank shape on each rank (CUDA only; for timing shapes that do not fit one
  // GPU, e.g. Qwen3.5-122B-A10B over 2+ GPUs). Rank r's weights are drawn from seed + r.
  static std::unique_ptr<TensorParallelGroup> random(const ModelConfig& cfg, int ranks, uint64_t seed,
                                                     std::vector<int> cuda_devices = {});
  ~TensorParallelGroup();

  int ranks() const { return static_cast<int>(backends_.size()); }
  Backend& rank(int r) { return *backends_[static_cast<size_t>(r)]; }
  // Runs f(r) for every rank at once, rank 0 on the calling thread (on CUDA each thread on its rank's
  // device), and rethrows the first failure. A rank that fails aborts the group's communicators, so the
  // others stop at their next reduction instead of waiting forever; the group is unusable afterwards
  // (DeviceError from every later call: open a new one). Check inputs before calling (TensorParallelEngine
  // does), so that a bad request is refused without breaking the group.
  void each(const std::function<void(int)>& f);
  bool aborted() const { return aborted_; }

 private:
  TensorParallelGroup() = default;
  // Gives every rank its communicator (see the class comment).
  void connect(const std::vector<int>& cuda_devices);
  Device device_ = Device::Cpu;
  std::vector<std::unique_ptr<Backend>> backends_;
  std::vector<std::shared_ptr<Communicator>> comms_;
  bool aborted_ = false;
};

// An engine per rank driven in lockstep: every call runs on all ranks at once and returns rank 0's view.
class TensorParallelEngine {
 public:
  TensorParallelEngine(TensorParallelGroup& group, CacheMode mode, EngineOptions opt);
  ~TensorParallelEngine();

  // A sequence's state on every rank (state[r] continues on rank r).
  struct States {
    std::vector<std::unique_ptr<State>> state;
  };
  // Engine::run on every rank: the logits and counts are rank 0's; `states` receives every rank's state.
  // The prompt is checked first, on the calling thread (InvalidArgument, the group intact).
  PromptResult run(const std::vector<PromptBlock>& blocks, States& states);
  // Engine::forward on every rank (its checks first, likewise).
  std::vector<float> forward(std::span<const int> ids, States& states);
  // Greedy decode of n tokens after `first` (the logits of the prompt's last token).
  std::vector<int> greedy_decode(const std::vector<float>& first, States& states, int n);
  Engine& engine(int r) { return *engines_[static_cast<size_t>(r)]; }

 private:
  TensorParallelGroup& g_;
  std::vector<std::unique_ptr<Engine>> engines_;
};

}  // namespace hypic
