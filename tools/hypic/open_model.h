// The model behind `hypic logits` / `hypic generate` / `hypic eval-pic`: a backend on --device (cpu,
// cuda or auto), optionally --random-weights on the GPU for timing production shapes from a config.json
// alone (then --model may name the config.json itself).
#pragma once
#include <memory>

#include "runtime/backend.h"
#include "tools/hypic/cli_args.h"

namespace hypic::cli {

// Reads --model, --device (default cpu), --random-weights, --seed.
std::unique_ptr<Backend> open_model(const Args& args);

}  // namespace hypic::cli
