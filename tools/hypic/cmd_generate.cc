// hypic generate --model DIR --ids-file F.json --max-new-tokens N [--stop-at-eos ID] [--device cpu|cuda|auto]
//                [--random-weights] [--seed N]
// Greedy decoding; prints the new ids as a JSON array.
#include <algorithm>
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
  args.allow_only({"model", "ids-file", "max-new-tokens", "stop-at-eos", "device", "random-weights", "seed"});
  auto model = open_model(args);
  Engine engine(*model, CacheMode::Full, {});
  auto state = model->new_state();
  const std::vector<int> ids = read_ids_json(args.require("ids-file"));
  if (ids.empty()) throw InvalidArgument("ids file '" + args.require("ids-file") + "' holds no token ids");
  const long long n = args.get_int("max-new-tokens", 16);
  if (n < 0) throw UsageError("--max-new-tokens must be >= 0");
  const long long eos = args.get_int("stop-at-eos", -1);
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

Registrar reg("generate", "greedy generation from token ids", run);

}  // namespace
}  // namespace hypic::cli
