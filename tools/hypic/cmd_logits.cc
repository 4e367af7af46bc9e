// hypic logits --model DIR --ids-file F.json [--device cpu|cuda|auto] [--random-weights] [--seed N]
// Prints {"argmax": [one id per position], "last_logits": [vocab floats for the last position]}.
#include <cstdio>
#include <iostream>

#include <nlohmann/json.hpp>

#include "runtime/error.h"
#include "runtime/engine.h"
#include "tools/hypic/open_model.h"
#include "tools/hypic/cli_args.h"

namespace hypic::cli {
namespace {

int run(int argc, char** argv) {
  Args args(argc, argv, {"random-weights"});
  args.allow_only({"model", "ids-file", "device", "random-weights", "seed"});
  auto model = open_model(args);
  Engine engine(*model, CacheMode::Full, {});
  auto state = model->new_state();
  const std::vector<int> ids = read_ids_json(args.require("ids-file"));
  if (ids.empty()) throw InvalidArgument("ids file '" + args.require("ids-file") + "' holds no token ids");
  const std::vector<float> all = engine.forward(ids, *state, /*all_logits=*/true);
  const int64_t V = model->config().vocab_size;
  nlohmann::json out;
  out["argmax"] = nlohmann::json::array();
  for (size_t t = 0; t < ids.size(); ++t) {
    const float* row = all.data() + t * V;
    out["argmax"].push_back(std::max_element(row, row + V) - row);
  }
  out["last_logits"] = std::vector<float>(all.end() - V, all.end());
  std::cout << out.dump() << "\n";
  return 0;
}

Registrar reg("logits", "print per-position argmax and last-position logits for token ids", run);

}  // namespace
}  // namespace hypic::cli
