// The model behind `hypic logits` / `hypic generate` / `hypic eval-pic`: a backend on --device (cpu,
// cuda or auto), optionally --random-weights on the GPU for timing production shapes from a config.json
// alone (then --model may name the config.json itself).
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "runtime/backend.h"
#include "tools/hypic/cli_args.h"

namespace hypic::cli {

struct ModelOptions {
  std::string model, device = "cpu";
  bool random_weights = false, quiet = false;
  uint64_t seed = 0;
};

// Declares --model, --device, --random-weights, --seed and --quiet, and the environment footer.
void add_model_options(CLI::App& app, ModelOptions& o);

// Loads the model (a progress line with bytes/s on a terminal while its weights are read).
std::unique_ptr<Backend> open_model(const ModelOptions& o);

}  // namespace hypic::cli
