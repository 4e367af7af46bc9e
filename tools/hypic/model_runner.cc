#include "tools/hypic/model_runner.h"

#include <filesystem>

#include "runtime/hybrid_model.h"
#ifdef HYPIC_WITH_CUDA
#include "runtime/cuda/cuda_model.h"
#endif

namespace hypic::cli {
namespace {

class CpuRunner : public ModelRunner {
 public:
  explicit CpuRunner(const std::string& dir) : model_(HybridModel::load(dir)), state_(model_->new_state()) {}
  int64_t vocab_size() const override { return model_->config().vocab_size; }
  std::vector<float> forward(std::span<const int> ids, bool all) override { return model_->forward(ids, state_, all); }

 private:
  std::unique_ptr<HybridModel> model_;
  SequenceState state_;
};

#ifdef HYPIC_WITH_CUDA
class CudaRunner : public ModelRunner {
 public:
  explicit CudaRunner(std::unique_ptr<CudaModel> m) : model_(std::move(m)), state_(model_->new_state()) {}
  int64_t vocab_size() const override { return model_->config().vocab_size; }
  std::vector<float> forward(std::span<const int> ids, bool all) override { return model_->forward(ids, state_, all); }

 private:
  std::unique_ptr<CudaModel> model_;
  CudaSequenceState state_;
};
#endif

}  // namespace

std::unique_ptr<ModelRunner> ModelRunner::open(const Args& args) {
  const std::string dir = args.require("model");
  const std::string device = args.get("device", "cpu");
  const bool random = args.has("random-weights");
  if (device == "cpu") {
    if (random) throw UsageError("--random-weights builds the model on the GPU: use it with --device cuda");
    return std::make_unique<CpuRunner>(dir);
  }
  if (device != "cuda") throw UsageError("--device must be cpu or cuda, got '" + device + "'");
#ifdef HYPIC_WITH_CUDA
  if (random) {  // --model may name the config.json itself: no weights are read
    const std::filesystem::path p(dir);
    const ModelConfig cfg = ModelConfig::load(std::filesystem::is_regular_file(p) ? p.string() : (p / "config.json").string());
    return std::make_unique<CudaRunner>(CudaModel::random(cfg, static_cast<uint64_t>(args.get_int("seed", 0))));
  }
  return std::make_unique<CudaRunner>(CudaModel::load(dir));
#else
  throw UsageError("this hypic was built without the CUDA backend (nvcc was not found at configure time)");
#endif
}

}  // namespace hypic::cli
