// `hypic generate` (options: the registration at the end).
// Greedy decoding; prints the new ids as a JSON array.
#include <algorithm>
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
  long long max_new_tokens = 16, stop_at_eos = -1;
};

int run(const Options& o) {
  auto model = open_model(o.model);
  Engine engine(*model, CacheMode::Full, {});
  auto state = model->new_state();
  const std::vector<int> ids = read_ids_json(o.ids_file);
  if (ids.empty()) throw InvalidArgument("ids file '" + o.ids_file + "' holds no token ids");
  const long long n = o.max_new_tokens, eos = o.stop_at_eos;
  std::vector<int> out;
  if (n > 0) {
    std::vector<float> logits = engine.forward(ids, *state);
    for (long long i = 0; i < n; ++i) {
      const int next = static_cast<int>(std::max_element(logits.begin(), logits.end()) - logits.begin());
      out.push_back(next);
      if (next == eos || i + 1 == n) break;
      const int one[1] = {next};
      logits = engine.forward(one, *state);
    }
  }
  std::cout << nlohmann::json(out).dump() << "\n";
  return 0;
}

Registrar reg("generate", "greedy generation from token ids", [](CLI::App& app) {
  auto o = std::make_shared<Options>();
  add_model_options(app, o->model);
  app.add_option("--ids-file", o->ids_file, "a JSON array of prompt token ids")->required();
  hypic::tools::add_int(app, "--max-new-tokens", o->max_new_tokens, "tokens to generate", 0LL, 1LL << 24);
  hypic::tools::add_int(app, "--stop-at-eos", o->stop_at_eos, "stop after generating this id (-1: never)", -1LL,
                        0x7fffffffLL);
  return [o] { return run(*o); };
});

}  // namespace
}  // namespace hypic::cli
