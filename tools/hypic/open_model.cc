#include "tools/hypic/open_model.h"

#include <filesystem>

#include "runtime/backends.h"
#include "tools/common/weights_prefetch.h"

namespace hypic::cli {

void add_model_options(CLI::App& app, ModelOptions& o) {
  app.add_option("--model", o.model, "model directory (config.json, *.safetensors, tokenizer.json)")->required();
  add_device(app, o.device, "cpu, cuda or auto (CUDA where built and a GPU is present)");
  app.add_flag("--random-weights", o.random_weights,
               "random weights of --model's config.json shape, on the GPU (timing without a checkpoint)");
  tools::add_u64(app, "--seed", o.seed, "seed of --random-weights");
  add_quiet(app, o.quiet);
  tools::configure(app, /*uses_model=*/true);
}

std::unique_ptr<Backend> open_model(const ModelOptions& o) {
  const Device device = resolve_device(o.device);
  if (!o.random_weights) {
    tools::prefetch_weights(o.model, o.quiet);
    return open_backend(o.model, device);
  }
  if (device != Device::Cuda) throw UsageError("--random-weights builds the model on the GPU: use it with --device cuda");
  const std::filesystem::path p(o.model);
  const ModelConfig cfg =
      ModelConfig::load(std::filesystem::is_regular_file(p) ? p.string() : (p / "config.json").string());
  return random_backend(cfg, o.seed, device);
}

}  // namespace hypic::cli
