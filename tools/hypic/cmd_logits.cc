// `hypic logits` (options: the registration at the end).
// Prints {"argmax": [one id per position], "last_logits": [vocab floats for the last position]}.
#include <cstdio>
#include <iostream>
#include <memory>

#include <nlohmann/json.hpp>

#include "runtime/engine.h"
#include "runtime/error.h"
#include "tools/hypic/cli_args.h"
#include "tools/hypic/open_model.h"

namespace hypic::cli {
namespace {

struct Options {
  ModelOptions model;
  std::string ids_file;
};

int run(const Options& o) {
  auto model = open_model(o.model);
  Engine engine(*model, CacheMode::Full, {});
  auto state = model->new_state();
  const std::vector<int> ids = read_ids_json(o.ids_file);
  if (ids.empty()) throw InvalidArgument("ids file '" + o.ids_file + "' holds no token ids");
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

Registrar reg("logits", "print per-position argmax and last-position logits for token ids", [](CLI::App& app) {
  auto o = std::make_shared<Options>();
  add_model_options(app, o->model);
  app.add_option("--ids-file", o->ids_file, "a JSON array of token ids")->required();
  return [o] { return run(*o); };
});

}  // namespace
}  // namespace hypic::cli
