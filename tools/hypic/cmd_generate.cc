// `hypic generate` (options: the registration at the end).
// Greedy decoding; prints the new ids as a JSON array. --tensor-parallel N splits the model over N ranks
// (runtime/tensor_parallel.h: CPU threads, or CUDA devices --tp-devices, NCCL between distinct GPUs); the
// ids are the same as on one rank up to float rounding.
#include <iostream>
#include <memory>

#include <nlohmann/json.hpp>

#include "runtime/backends.h"
#include "runtime/engine.h"
#include "runtime/error.h"
#include "runtime/tensor_parallel.h"
#include "tools/hypic/cli_args.h"
#include "tools/hypic/open_model.h"

namespace hypic::cli {
namespace {

struct Options {
  ModelOptions model;
  std::string ids_file;
  long long max_new_tokens = 16, stop_at_eos = -1;
  int tensor_parallel = 1;
  std::vector<int> tp_devices;
};

int run_tensor_parallel(const Options& o, const std::vector<int>& ids) {
  const Device device = resolve_device(o.model.device);
  std::unique_ptr<TensorParallelGroup> g;
  if (o.model.random_weights) {
    std::string path = o.model.model;
    if (path.size() < 5 || path.substr(path.size() - 5) != ".json") path += "/config.json";
    g = TensorParallelGroup::random(ModelConfig::load(path), o.tensor_parallel, o.model.seed, o.tp_devices);
  } else {
    g = TensorParallelGroup::open(o.model.model, o.tensor_parallel, device, o.tp_devices);
  }
  TensorParallelEngine engine(*g, CacheMode::Full, {});
  TensorParallelEngine::States states;
  std::vector<int> out;
  if (o.max_new_tokens > 0)
    out = greedy_tokens(engine.run(cacheable_blocks({ids}), states).logits, o.max_new_tokens, o.stop_at_eos,
                        [&](int next) {
                          const int one[1] = {next};
                          return engine.forward(one, states);
                        });
  std::cout << nlohmann::json(out).dump() << "\n";
  return 0;
}

int run(const Options& o) {
  const std::vector<int> ids = read_ids_json(o.ids_file);
  if (ids.empty()) throw InvalidArgument("ids file '" + o.ids_file + "' holds no token ids");
  if (o.tensor_parallel > 1 || !o.tp_devices.empty()) return run_tensor_parallel(o, ids);
  auto model = open_model(o.model);
  Engine engine(*model, CacheMode::Full, {});
  auto state = model->new_state();
  std::vector<int> out;
  if (o.max_new_tokens > 0)
    out = greedy_tokens(engine.forward(ids, *state), o.max_new_tokens, o.stop_at_eos, [&](int next) {
      const int one[1] = {next};
      return engine.forward(one, *state);
    });
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
  hypic::tools::add_int(app, "--tensor-parallel", o->tensor_parallel,
                        "split the model over this many ranks (Qwen3-Next / Qwen3.5 layers)", 1, 64);
  app.add_option("--tp-devices", o->tp_devices, "CUDA device of each rank (comma-separated; default 0..N-1)")
      ->delimiter(',')
      ->check(CLI::Range(0, 1023));
  return [o] { return run(*o); };
});

}  // namespace
}  // namespace hypic::cli
