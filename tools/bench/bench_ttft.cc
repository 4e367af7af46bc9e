// Time to first token of the caching engine on CUDA (runtime/cuda/cuda_engine.h) on a RAG workload, per
// mode (full / prefix / hypic, DESIGN §1.6), printed as one JSON object.
//
// Workload (random token ids, a pure function of --seed, the same request sequence for every mode): a
// system block, a tool-docs block, k retrieved chunks (k uniform in [--chunks-min, --chunks-max]) drawn
// without repetition from a pool of --pool chunks of about --chunk-tokens tokens each (so chunks recur
// across requests in changing order), and a fresh question. Every mode gets a fresh engine, runs
// --warmup requests (kernels, the scratch pool, and the cache it would hold in steady state), then
// --requests measured ones. TTFT is run()'s wall time ending after a device sync.
// Usage:
//   hypic_bench_ttft --config CONFIG.json [--requests 8] [--mode full|prefix|hypic|naive|noseam|all]
//                    [--warmup 8] [--pool 48] [--chunks-min 8] [--chunks-max 16] [--chunk-tokens 512]
//                    [--system 300] [--tools 600] [--question 30] [--seam 8] [--budget-gb 40] [--seed 1]
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "kernels/cuda/check.h"
#include "runtime/cuda/cuda_engine.h"
#include "runtime/error.h"
#include "runtime/model_config.h"

using namespace hypic;

namespace {

struct Args {
  std::string config;
  std::vector<CacheMode> modes = {CacheMode::Full, CacheMode::Prefix, CacheMode::Hypic};
  int requests = 8, warmup = 8, pool = 48, chunks_min = 8, chunks_max = 16;
  int64_t chunk_tokens = 512, system = 300, tools = 600, question = 30, seam = 8;
  double budget_gb = 40;
  uint64_t seed = 1;
};

[[noreturn]] void usage(const std::string& why) {
  std::fprintf(stderr,
               "hypic_bench_ttft: %s\n"
               "usage: hypic_bench_ttft --config CONFIG.json [--requests 8] [--mode full|prefix|hypic|naive|noseam|all]\n"
               "       [--warmup 8] [--pool 48] [--chunks-min 8] [--chunks-max 16] [--chunk-tokens 512]\n"
               "       [--system 300] [--tools 600] [--question 30] [--seam 8] [--budget-gb 40] [--seed 1]\n",
               why.c_str());
  std::exit(2);
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage("missing value for " + k);
      return argv[++i];
    };
    if (k == "--config") a.config = value();
    else if (k == "--mode") {
      const std::string m = value();
      if (m == "all") a.modes = {CacheMode::Full, CacheMode::Prefix, CacheMode::Hypic};
      else {
        try {
          a.modes = {parse_mode(m)};
        } catch (const InvalidArgument& e) {
          usage(e.what());
        }
      }
    } else if (k == "--requests") a.requests = std::atoi(value().c_str());
    else if (k == "--warmup") a.warmup = std::atoi(value().c_str());
    else if (k == "--pool") a.pool = std::atoi(value().c_str());
    else if (k == "--chunks-min") a.chunks_min = std::atoi(value().c_str());
    else if (k == "--chunks-max") a.chunks_max = std::atoi(value().c_str());
    else if (k == "--chunk-tokens") a.chunk_tokens = std::atoll(value().c_str());
    else if (k == "--system") a.system = std::atoll(value().c_str());
    else if (k == "--tools") a.tools = std::atoll(value().c_str());
    else if (k == "--question") a.question = std::atoll(value().c_str());
    else if (k == "--seam") a.seam = std::atoll(value().c_str());
    else if (k == "--budget-gb") a.budget_gb = std::atof(value().c_str());
    else if (k == "--seed") a.seed = std::strtoull(value().c_str(), nullptr, 10);
    else usage("unknown option " + k);
  }
  if (a.config.empty()) usage("--config CONFIG.json is required");
  if (a.requests < 1 || a.warmup < 0) usage("--requests must be >= 1 and --warmup >= 0");
  if (a.chunks_min < 0 || a.chunks_max < a.chunks_min || a.chunks_max > a.pool)
    usage("need 0 <= --chunks-min <= --chunks-max <= --pool");
  if (a.chunk_tokens < 1 || a.system < 1 || a.tools < 1 || a.question < 1 || a.seam < 0 || a.budget_gb <= 0)
    usage("block sizes must be >= 1, --seam >= 0, --budget-gb > 0");
  return a;
}

std::vector<int> random_ids(int64_t n, int64_t V, std::mt19937_64& rng) {
  std::uniform_int_distribution<int> d(0, static_cast<int>(V) - 1);
  std::vector<int> v(static_cast<size_t>(n));
  for (auto& x : v) x = d(rng);
  return v;
}

// The request sequence: every request is [system, tools, chunk..., question].
std::vector<std::vector<std::vector<int>>> make_workload(const Args& a, int64_t V) {
  std::mt19937_64 rng(a.seed);
  const auto system = random_ids(a.system, V, rng), tools = random_ids(a.tools, V, rng);
  std::vector<std::vector<int>> pool;
  std::uniform_int_distribution<int64_t> len(a.chunk_tokens * 7 / 8, a.chunk_tokens * 9 / 8);  // ~ chunk_tokens
  for (int i = 0; i < a.pool; ++i) pool.push_back(random_ids(std::max<int64_t>(1, len(rng)), V, rng));
  std::vector<std::vector<std::vector<int>>> reqs;
  std::uniform_int_distribution<int> k_of(a.chunks_min, a.chunks_max);
  std::vector<int> order(static_cast<size_t>(a.pool));
  for (int r = 0; r < a.warmup + a.requests; ++r) {
    for (int i = 0; i < a.pool; ++i) order[i] = i;
    std::shuffle(order.begin(), order.end(), rng);  // the top-k of a retriever, in its ranking order
    std::vector<std::vector<int>> blocks = {system, tools};
    const int k = k_of(rng);
    for (int i = 0; i < k; ++i) blocks.push_back(pool[order[i]]);
    blocks.push_back(random_ids(a.question, V, rng));
    reqs.push_back(std::move(blocks));
  }
  return reqs;
}

double percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  const double at = p * (v.size() - 1);
  const size_t lo = static_cast<size_t>(at), hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (at - lo) * (v[hi] - v[lo]);
}

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

size_t device_used_bytes() {
  size_t free = 0, total = 0;
  HYPIC_CUDA_CHECK(cudaMemGetInfo(&free, &total));
  return total - free;
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse(argc, argv);
  try {
    if (!cuda::device_available()) {
      std::fprintf(stderr, "hypic_bench_ttft: no CUDA device\n");
      return 1;
    }
    std::string path = a.config;
    if (std::filesystem::is_directory(path)) path = (std::filesystem::path(path) / "config.json").string();
    const auto t_load = std::chrono::steady_clock::now();
    auto model = CudaModel::random(ModelConfig::load(path), a.seed);
    HYPIC_CUDA_CHECK(cudaDeviceSynchronize());
    const double load_s = seconds_since(t_load);
    const auto reqs = make_workload(a, model->config().vocab_size);
    double mean_prompt = 0;
    for (int r = a.warmup; r < a.warmup + a.requests; ++r)
      for (auto& b : reqs[r]) mean_prompt += static_cast<double>(b.size()) / a.requests;

    EngineOptions opt;
    opt.seam_width = a.seam;
    opt.cache_budget_bytes = static_cast<size_t>(a.budget_gb * 1e9);
    std::printf("{\n  \"model\": \"random weights, %s\",\n  \"weight_bytes\": %zu, \"load_seconds\": %.1f,\n",
                a.config.c_str(), model->weight_bytes(), load_s);
    std::printf("  \"workload\": {\"system\": %lld, \"tools\": %lld, \"pool\": %d, \"chunk_tokens\": %lld, "
                "\"chunks_per_request\": [%d, %d], \"question\": %lld, \"warmup\": %d, \"requests\": %d, "
                "\"mean_prompt_tokens\": %.1f, \"seam_width\": %lld, \"cache_budget_bytes\": %zu, \"seed\": %llu},\n",
                static_cast<long long>(a.system), static_cast<long long>(a.tools), a.pool,
                static_cast<long long>(a.chunk_tokens), a.chunks_min, a.chunks_max, static_cast<long long>(a.question),
                a.warmup, a.requests, mean_prompt, static_cast<long long>(a.seam), opt.cache_budget_bytes,
                static_cast<unsigned long long>(a.seed));
    std::printf("  \"modes\": [");
    for (size_t mi = 0; mi < a.modes.size(); ++mi) {
      const CacheMode mode = a.modes[mi];
      const auto t_mode = std::chrono::steady_clock::now();
      CudaEngine engine(*model, mode, opt);
      std::vector<double> ttft;
      double computed = 0, hits = 0, blocks = 0;
      for (int r = 0; r < a.warmup + a.requests; ++r) {
        const CudaPromptResult res = engine.run(reqs[r]);
        const bool measured = r >= a.warmup;
        int64_t h = 0;
        for (auto& b : res.blocks) h += b.hit;
        std::fprintf(stderr, "[%s] %s request %d: %lld prompt tokens, %lld computed, %lld/%zu blocks hit, %.1f ms\n",
                     mode_name(mode), measured ? "measured" : "warm-up", r, static_cast<long long>(res.prompt_tokens),
                     static_cast<long long>(res.computed_tokens), static_cast<long long>(h), res.blocks.size(),
                     res.ttft_ms);
        if (!measured) continue;
        ttft.push_back(res.ttft_ms);
        computed += static_cast<double>(res.computed_tokens) / a.requests;
        hits += static_cast<double>(h);
        blocks += static_cast<double>(res.blocks.size());
      }
      const SegmentStoreStats st = engine.store().stats();
      double mean = 0;
      for (double t : ttft) mean += t / ttft.size();
      std::printf("%s\n    {\"mode\": \"%s\", \"ttft_ms\": {\"p50\": %.2f, \"p90\": %.2f, \"mean\": %.2f, \"min\": %.2f, "
                  "\"max\": %.2f}, \"mean_computed_tokens\": %.1f, \"hit_rate\": %.3f, \"cache_bytes\": %zu, "
                  "\"cache_entries\": %zu, \"evictions\": %lld, \"device_bytes_in_use\": %zu, \"mode_seconds\": %.1f, "
                  "\"ttft_ms_per_request\": [",
                  mi ? "," : "", mode_name(mode), percentile(ttft, 0.5), percentile(ttft, 0.9), mean,
                  *std::min_element(ttft.begin(), ttft.end()), *std::max_element(ttft.begin(), ttft.end()), computed,
                  blocks > 0 ? hits / blocks : 0.0, st.bytes, st.entries, static_cast<long long>(st.evictions),
                  device_used_bytes(), seconds_since(t_mode));
      for (size_t i = 0; i < ttft.size(); ++i) std::printf("%s%.1f", i ? ", " : "", ttft[i]);
      std::printf("]}");
      std::fflush(stdout);
    }
    std::printf("\n  ]\n}\n");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hypic_bench_ttft: %s\n", e.what());
    return 1;
  }
  return 0;
}
