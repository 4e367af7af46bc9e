// The model behind `hypic logits` / `hypic generate`: --device cpu (HybridModel, fp32) or --device cuda
// (CudaModel, bf16; only in builds with the CUDA backend), optionally --random-weights on the GPU for
// timing production shapes from a config.json alone.
#pragma once
#include <memory>
#include <span>
#include <vector>

#include "tools/hypic/cli_args.h"

namespace hypic::cli {

class ModelRunner {
 public:
  virtual ~ModelRunner() = default;
  // Reads --model (a model directory; with --random-weights also a config.json), --device (cpu|cuda),
  // --random-weights, --seed.
  static std::unique_ptr<ModelRunner> open(const Args& args);
  virtual int64_t vocab_size() const = 0;
  // Continues this runner's own sequence with `ids`; logits of the last token, or of every token.
  virtual std::vector<float> forward(std::span<const int> ids, bool all_logits) = 0;
};

}  // namespace hypic::cli
