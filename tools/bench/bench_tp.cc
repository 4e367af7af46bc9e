// Tensor-parallel throughput and TTFT (runtime/tensor_parallel.h), printed as one JSON object: a model split
// over --tp ranks (CUDA: rank r on device --devices[r], default 0..tp-1, NCCL between distinct devices,
// host staging where ranks share one; CPU: threads), driven by TensorParallelEngine:
//   prefill: one cold --prefill-token prompt in full mode (tokens/s of the whole group);
//   decode: --decode one-token steps continuing it (ms per token);
//   rag: for full, prefix and hypic, a fresh engine group runs --warmup then --requests requests of a
//     system block, --chunks chunks of about --chunk-tokens tokens drawn from a pool of 2 x --chunks (so
//     chunks recur in new orders) and a question; TTFT p50 / p90 of the measured ones.
// Usage:
//   hypic_bench_tp --config CONFIG.json --tp 2 [--devices 0,1] [--prefill 8192] [--decode 32]
//                  [--requests 6] [--warmup 4] [--chunks 12] [--chunk-tokens 512] [--budget-gb 40] [--seed 1]
//   hypic_bench_tp --model DIR --device cpu --tp 2 ...   (a model directory's weights, e.g. on the CPU)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "runtime/backends.h"
#include "runtime/engine.h"
#include "runtime/error.h"
#include "runtime/model_config.h"
#include "runtime/tensor_parallel.h"
#include "tools/common/options.h"

using namespace hypic;

namespace {

struct Args {
  std::string config, model, device = "cuda";
  int tp = 2;
  std::vector<int> devices;
  int64_t prefill = 8192, chunk_tokens = 512, system = 300, question = 30;
  int decode = 32, requests = 6, warmup = 4, chunks = 12;
  double budget_gb = 40;
  uint64_t seed = 1;
};

Args parse(int argc, char** argv) {
  Args a;
  CLI::App app("Tensor-parallel prefill, decode and RAG TTFT (one JSON object on stdout)", "hypic_bench_tp");
  tools::configure(app, /*uses_model=*/true);
  auto* config = app.add_option("--config", a.config, "CONFIG.json (or its folder): random weights of its shape, CUDA");
  app.add_option("--model", a.model, "model directory (its weights)")->excludes(config);
  app.add_option("--device", a.device, "device")->check(CLI::IsMember({"cuda", "cpu"}));
  tools::add_int(app, "--tp", a.tp, "tensor-parallel ranks", 1, 64);
  app.add_option("--devices", a.devices, "CUDA device of each rank (comma-separated; default 0..tp-1)")
      ->delimiter(',')
      ->check(CLI::Range(0, 1023));
  tools::add_int<int64_t>(app, "--prefill", a.prefill, "prefill tokens", 1, int64_t{1} << 22);
  tools::add_int(app, "--decode", a.decode, "decode steps", 1, 1 << 20);
  tools::add_int(app, "--requests", a.requests, "rag: measured requests per mode", 1, 1 << 16);
  tools::add_int(app, "--warmup", a.warmup, "rag: warm-up requests per mode", 0, 1 << 16);
  tools::add_int(app, "--chunks", a.chunks, "rag: chunks per request", 1, 1 << 12);
  tools::add_int<int64_t>(app, "--chunk-tokens", a.chunk_tokens, "rag: tokens per chunk (about)", 1, 1 << 20);
  app.add_option("--budget-gb", a.budget_gb, "rag: segment store budget per rank, GB")->check(CLI::Range(1e-6, 1e6));
  tools::add_u64(app, "--seed", a.seed, "workload (and random weights) seed");
  tools::parse_or_exit(app, argc, argv);
  if (a.config.empty() == a.model.empty()) {
    std::fprintf(stderr, "hypic_bench_tp: give --config CONFIG.json (random weights, CUDA) or --model DIR\n");
    std::exit(2);
  }
  return a;
}

double ms_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
}

double percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  return v[static_cast<size_t>(p * static_cast<double>(v.size() - 1) + 0.5)];
}

std::vector<int> random_ids(int64_t n, int64_t V, std::mt19937_64& rng) {
  std::uniform_int_distribution<int> d(0, static_cast<int>(V) - 1);
  std::vector<int> v(static_cast<size_t>(n));
  for (int& x : v) x = d(rng);
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse(argc, argv);
  try {
    const Device device = resolve_device(a.device);
    std::unique_ptr<TensorParallelGroup> g;
    if (!a.model.empty()) {
      g = TensorParallelGroup::open(a.model, a.tp, device, a.devices);
    } else {
      if (device != Device::Cuda) throw InvalidArgument("random weights (--config) are generated on the GPU: --device cuda");
      std::string path = a.config;
      if (path.size() < 5 || path.substr(path.size() - 5) != ".json") path += "/config.json";
      g = TensorParallelGroup::random(ModelConfig::load(path), a.tp, a.seed, a.devices);
    }
    std::vector<int> devs = a.devices;
    if (devs.empty() && device == Device::Cuda)
      for (int r = 0; r < a.tp; ++r) devs.push_back(r);
    std::vector<int> sorted = devs;
    std::sort(sorted.begin(), sorted.end());
    const bool distinct = std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end();
    const char* transport = device == Device::Cpu ? "threads" : a.tp == 1 ? "none" : distinct ? "nccl" : "staged";
    const int64_t V = g->rank(0).config().vocab_size;
    std::mt19937_64 rng(a.seed);

    std::printf("{\n  \"tp\": %d, \"device\": \"%s\", \"transport\": \"%s\", \"devices\": [", a.tp, device_name(device),
                transport);
    for (size_t i = 0; i < devs.size(); ++i) std::printf("%s%d", i ? ", " : "", devs[i]);
    std::printf("]");

    // ---- prefill and decode ----
    {
      TensorParallelEngine warm(*g, CacheMode::Full, {});
      TensorParallelEngine::States ws;
      warm.run(cacheable_blocks({random_ids(std::min<int64_t>(a.prefill, 512), V, rng)}), ws);
    }
    TensorParallelEngine full(*g, CacheMode::Full, {});
    TensorParallelEngine::States st;
    auto t0 = std::chrono::steady_clock::now();
    PromptResult r = full.run(cacheable_blocks({random_ids(a.prefill, V, rng)}), st);
    const double prefill_ms = ms_since(t0);
    int next = static_cast<int>(std::max_element(r.logits.begin(), r.logits.end()) - r.logits.begin());
    t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < a.decode; ++i) {
      const int id[1] = {next};
      const std::vector<float> l = full.forward(id, st);
      next = static_cast<int>(std::max_element(l.begin(), l.end()) - l.begin());
    }
    const double decode_ms = ms_since(t0) / a.decode;
    std::printf(",\n  \"prefill\": {\"tokens\": %lld, \"ms\": %.2f, \"tokens_per_s\": %.0f},\n  \"decode\": {\"steps\": %d, "
                "\"context\": %lld, \"ms_per_token\": %.3f, \"tokens_per_s\": %.1f}",
                static_cast<long long>(a.prefill), prefill_ms, a.prefill / prefill_ms * 1e3, a.decode,
                static_cast<long long>(a.prefill), decode_ms, 1e3 / decode_ms);
    std::fflush(stdout);

    // ---- RAG TTFT per mode ----
    std::vector<std::vector<int>> pool;
    for (int i = 0; i < 2 * a.chunks; ++i) pool.push_back(random_ids(a.chunk_tokens, V, rng));
    const std::vector<int> system = random_ids(a.system, V, rng);
    std::vector<std::vector<PromptBlock>> reqs;
    for (int q = 0; q < a.warmup + a.requests; ++q) {
      std::vector<int> idx(pool.size());
      for (size_t i = 0; i < idx.size(); ++i) idx[i] = static_cast<int>(i);
      std::shuffle(idx.begin(), idx.end(), rng);
      std::vector<std::vector<int>> blocks = {system};
      for (int c = 0; c < a.chunks; ++c) blocks.push_back(pool[static_cast<size_t>(idx[static_cast<size_t>(c)])]);
      blocks.push_back(random_ids(a.question, V, rng));
      reqs.push_back(cacheable_blocks(blocks));
    }
    std::printf(",\n  \"rag\": {\"chunks\": %d, \"chunk_tokens\": %lld, \"requests\": %d, \"warmup\": %d, \"modes\": [",
                a.chunks, static_cast<long long>(a.chunk_tokens), a.requests, a.warmup);
    bool first = true;
    EngineOptions opt;  // the default budget (1 GiB) holds a few entries at production shapes
    opt.cache_budget_bytes = static_cast<size_t>(a.budget_gb * 1e9);
    for (CacheMode mode : {CacheMode::Full, CacheMode::Prefix, CacheMode::Hypic}) {
      TensorParallelEngine eng(*g, mode, opt);
      std::vector<double> ttft;
      for (size_t q = 0; q < reqs.size(); ++q) {
        TensorParallelEngine::States s;
        const auto t = std::chrono::steady_clock::now();
        eng.run(reqs[q], s);
        if (static_cast<int>(q) >= a.warmup) ttft.push_back(ms_since(t));
      }
      std::printf("%s\n    {\"mode\": \"%s\", \"ttft_ms\": {\"p50\": %.2f, \"p90\": %.2f}}", first ? "" : ",",
                  mode_name(mode), percentile(ttft, 0.5), percentile(ttft, 0.9));
      first = false;
      std::fflush(stdout);
    }
    std::printf("\n  ]}\n}\n");
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "hypic_bench_tp: %s\n", e.what());
    return 1;
  }
  return 0;
}
