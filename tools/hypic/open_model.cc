#include "tools/hypic/open_model.h"

#include <filesystem>

#include "runtime/backends.h"

namespace hypic::cli {

std::unique_ptr<Backend> open_model(const Args& args) {
  const std::string dir = args.require("model");
  const Device device = resolve_device(args.get("device", "cpu"));
  if (!args.has("random-weights")) return open_backend(dir, device);
  if (device != Device::Cuda) throw UsageError("--random-weights builds the model on the GPU: use it with --device cuda");
  const std::filesystem::path p(dir);
  const ModelConfig cfg = ModelConfig::load(std::filesystem::is_regular_file(p) ? p.string() : (p / "config.json").string());
  return random_backend(cfg, static_cast<uint64_t>(args.get_int("seed", 0)), device);
}

}  // namespace hypic::cli
