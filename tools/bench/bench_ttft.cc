// Time to first token of the caching engine (runtime/engine.h) on a device: CUDA with random weights of
// CONFIG's shape (--config), or any device with a model directory's weights (--model DIR, e.g. the CPU
// fixture models with --device cpu), per mode (full / prefix / hypic,
// docs/engine.md), printed as one JSON object on stdout (progress goes to stderr; --quiet drops it). Three cases (--case,
// default all), each under its own top-level key:
//
//   "rag": the steady state of a RAG service. Workload (random token ids, a pure function of --seed, the
//     same request sequence for every mode): a system block, a tool-docs block, k retrieved chunks (k
//     uniform in [--chunks-min, --chunks-max]) drawn without repetition from a pool of --pool chunks of
//     about --chunk-tokens tokens each (so chunks recur across requests in changing order), and a fresh
//     question. Every mode (--mode) gets a fresh engine, runs --warmup requests (kernels, the scratch
//     pool, and the cache it would hold in steady state), then --requests measured ones.
//
//   "cold": the cost of a fully cold request. The --requests measured requests of the same workload, each
//     run in modes full, prefix and hypic on a FRESH engine (empty segment store, destroyed afterwards so
//     its device memory is freed); modes interleave per request. Each mode first runs one throwaway
//     warm-up request (the longest measured one, on its own fresh engine: kernels, scratch pool). Every
//     (request, mode) runs --repeats times (all modes of one repeat, then the next) and its TTFT is the
//     median of those (one cold request is short, so single runs are noisy). Reports
//     p50/mean TTFT per mode and, per request, hypic/full and prefix/full with their mean and max: the
//     project target is "a fully cold hypic request <= 1.15x the full-mode TTFT of the same prompt".
//
//   "tiers": where a hit comes from (docs/cache_tiers.md). The --requests measured requests of the rag
//     workload are run once to cache their blocks, then again with their chunks in reverse order and a
//     fresh question (so no chain entry applies and every chunk is a content hit), in hypic mode, with the
//     entries held (a) on the device, (b) only in host memory, (c) only in a cache directory on disk (a
//     fresh temporary one; the OS page cache is warm), as records of --tier-format; and (d) recomputed (a
//     fresh engine per request). Reports TTFT per tier and the record bytes per chunk.
//
//   "agent": a --turns-turn tool-using conversation per mode full, prefix, hypic, each on a fresh engine
//     (after a throwaway two-turn warm-up on another fresh engine). Turn 1 is [system, tools, user message
//     (--question tokens)]; after every turn --reply-tokens tokens are decoded greedily one at a time
//     (Engine::forward, the decode-graph path); the next prompt is the previous one's blocks with the
//     reply appended to its last block, then a tool result (~--tool-tokens random ids) and a new user
//     message as the query. run() gets the live sequence: its state and every token run so far (the
//     prompt plus the reply but its last token, which was sampled and not run), as an SDK Session does.
//     Reports per turn prompt/new/reused/computed tokens and TTFT: in prefix and hypic mode, from turn 2
//     on, computed_tokens == prompt_tokens - reused_tokens == the new tokens and TTFT stays flat, while
//     full mode recomputes the growing prompt. (Reply ids come from each mode's own greedy decode and may
//     differ between modes; their lengths do not.)
//
//   "scatter": the cold path over several workers (runtime/cold_scatter.h). One cold request of about
//     --scatter-tokens tokens: a system block and ten documents of uneven sizes, long and short ones in
//     turn (fractions 0.30, 0.02, 0.20, 0.03, 0.12, 0.04, 0.10, 0.05, 0.08, 0.06 of the rest, in prompt
//     order: round robin over two workers stacks the long ones on one), and the question. Measured on a
//     fresh engine per run (median of --repeats): the one-pass cold run (every missing block an isolated
//     lane of the stitch's pass, run()'s own cold path), and for each worker count of --workers and both
//     placements (lpt, round-robin): ColdScatter::prefill_missing on that many workers (the engine's
//     backend and Backend::worker() siblings: CUDA streams of the one device, or CPU threads; with
//     --scatter-devices, replicas of the model on those GPUs, gathered by peer copies), then run(),
//     which finds every block. Reports the scatter phase (and each worker's pass), the stitch, their sum,
//     and the scatter phase's scaling against one worker: t(1) / (W t(W)).
//
//   "state": how far the composed state is from full recompute, layer by layer (the paper's "composed
//     state vs full recompute"). For each of the --requests measured requests of the rag workload: full
//     mode on a fresh engine gives the reference state after the prompt; hypic, naive and noseam each run
//     on a fresh engine the request with its chunks in reverse order first (every chunk becomes a content
//     entry, while only system + tools match as a chain), then the request itself, whose chunks are thus
//     all composed. The states after the prompt are compared per layer: linear layers by
//     ||S - S_full|| / ||S_full|| over every head, attention layers by the same over their K and V rows
//     (matched by position); and the first-token distributions by KL and top-1 agreement. Reported as
//     the mean over requests.
//
// TTFT is run()'s wall time ending after a device sync (PromptResult::ttft_ms). Every engine runs its
// warm-up passes at construction (--warm-up-rows, 8192 by default on CUDA: the first pass of each power-of-two
// row count loads cuBLAS kernels, ~3 ms each, which a server pays at start-up, not on a request).
// Usage:
//   hypic_bench_ttft (--config CONFIG.json | --model DIR) [--device cuda|cpu] [--case rag|cold|agent|tiers|state|scatter|all] [--requests 8] [--repeats 3]
//                    [--mode full|prefix|hypic|naive|noseam|all] (modes of the rag case)
//                    [--warmup 8] [--profile-request N] [--pool 48] [--chunks-min 8] [--chunks-max 16] [--chunk-tokens 512]
//                    [--system 300] [--tools 600] [--question 30] [--seam 8] [--budget-gb 40] [--seed 1]
//                    [--warm-up-rows 8192]
//                    [--turns 8] [--reply-tokens 32] [--tool-tokens 64] [--tier-format fp32|bf16|compact]
//                    [--scatter-tokens 32768] [--workers 1,2,4] [--scatter-devices 0,1,2,3]
//                    [--quiet]   (--help lists them all)
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#ifdef HYPIC_WITH_CUDA
#include <cuda_profiler_api.h>
#include <cuda_runtime.h>

#include "kernels/cuda/check.h"
#include "runtime/cuda/cuda_backend.h"
#endif
#include "kernels/sampling.h"
#include "runtime/backends.h"
#include "runtime/cold_scatter.h"
#include "runtime/engine.h"
#include "runtime/error.h"
#include "runtime/model_config.h"
#include "sdk/cache_dir.h"
#include "tools/common/options.h"

using namespace hypic;

namespace {

const std::vector<CacheMode> kMainModes = {CacheMode::Full, CacheMode::Prefix, CacheMode::Hypic};

struct Args {
  std::string config, model, device = "cuda";
  bool rag = true, cold = true, agent = true, tiers = false, state = false, scatter = false;
  int64_t scatter_tokens = 32768;
  std::vector<int> workers = {1, 2, 4};
  std::vector<int> scatter_devices;  // worker i on CUDA device scatter_devices[i] (replicas); empty: streams
  std::string tier_format = "fp32";
  std::vector<CacheMode> modes = kMainModes;  // of the rag case
  int requests = 8, warmup = 8, pool = 48, chunks_min = 8, chunks_max = 16, repeats = 3;
  int profile_request = -1;  // rag: the request run between cudaProfilerStart and Stop (ncu --profile-from-start off)
  int64_t chunk_tokens = 512, system = 300, tools = 600, question = 30, seam = 8;
  int turns = 8;
  int64_t reply_tokens = 32, tool_tokens = 64;
  double budget_gb = 40;
  long long warm_up_rows = 8192;
  uint64_t seed = 1;
  bool quiet = false;
};

[[noreturn]] void usage(const std::string& why) {
  std::fprintf(stderr, "hypic_bench_ttft: %s\nRun with --help for the options.\n", why.c_str());
  std::exit(2);
}

// Every option declared once (tools/common/options.h): --help lists them with their defaults, a
// malformed or out-of-range value is an error naming the option.
Args parse(int argc, char** argv) {
  Args a;
  std::string cases = "all", mode = "all";
  CLI::App app("Time to first token of the caching engine per mode: rag, cold and agent cases (one JSON object "
               "on stdout)", "hypic_bench_ttft");
  tools::configure(app, /*uses_model=*/true);
  auto* config = app.add_option("--config", a.config, "CONFIG.json (or its folder): random weights of its shape, CUDA");
  app.add_option("--model", a.model, "model directory (its weights)")->excludes(config);
  app.add_option("--device", a.device, "device")->check(CLI::IsMember({"cuda", "cpu"}));
  app.add_option("--case", cases, "which cases (all: rag, cold, agent)")
      ->check(CLI::IsMember({"rag", "cold", "agent", "tiers", "state", "scatter", "all"}));
  app.add_option("--tier-format", a.tier_format, "tiers case: record format below the device")
      ->check(CLI::IsMember({"fp32", "bf16", "compact"}));
  app.add_option("--mode", mode, "modes of the rag case")
      ->check(CLI::IsMember({"full", "prefix", "hypic", "naive", "noseam", "all"}));
  tools::add_int(app, "--requests", a.requests, "measured requests", 1, 1 << 20);
  tools::add_int(app, "--repeats", a.repeats, "cold case: runs of every (request, mode); the median counts", 1, 1 << 10);
  tools::add_int(app, "--warmup", a.warmup, "warm-up requests per mode (rag)", 0, 1 << 20);
  tools::add_int(app, "--profile-request", a.profile_request,
                 "rag: run this request (0-based, warm-up ones counted) inside a CUDA profiler range, e.g. for "
                 "ncu --profile-from-start off",
                 0, 1 << 20);
  tools::add_int(app, "--pool", a.pool, "chunks in the pool", 1, 1 << 20);
  tools::add_int(app, "--chunks-min", a.chunks_min, "fewest chunks per request", 0, 1 << 20);
  tools::add_int(app, "--chunks-max", a.chunks_max, "most chunks per request (<= --pool)", 0, 1 << 20);
  tools::add_int<int64_t>(app, "--chunk-tokens", a.chunk_tokens, "tokens per chunk (about)", 1, 1 << 24);
  tools::add_int<int64_t>(app, "--system", a.system, "system block tokens", 1, 1 << 24);
  tools::add_int<int64_t>(app, "--tools", a.tools, "tool-docs block tokens", 1, 1 << 24);
  tools::add_int<int64_t>(app, "--question", a.question, "question tokens", 1, 1 << 24);
  tools::add_int<int64_t>(app, "--seam", a.seam, "seam width", 0, 65536);
  app.add_option("--budget-gb", a.budget_gb, "segment store budget, GB")->check(CLI::Range(1e-6, 1e6));
  app.add_option("--warm-up-rows", a.warm_up_rows,
                 "each engine's warm-up passes at construction, up to this many rows (EngineOptions::warm_up_rows, "
                 "as the SDK runtime opens on CUDA); 0: none")
      ->check(CLI::Range(0LL, 1LL << 20));
  tools::add_u64(app, "--seed", a.seed, "workload (and random weights) seed");
  tools::add_int(app, "--turns", a.turns, "agent case: turns", 1, 1 << 16);
  tools::add_int<int64_t>(app, "--reply-tokens", a.reply_tokens, "agent case: tokens decoded per turn", 1, 1 << 20);
  tools::add_int<int64_t>(app, "--tool-tokens", a.tool_tokens, "agent case: tokens per tool result", 1, 1 << 24);
  tools::add_int<int64_t>(app, "--scatter-tokens", a.scatter_tokens, "scatter case: tokens of the cold request", 64,
                          int64_t{1} << 24);
  app.add_option("--workers", a.workers, "scatter case: worker counts (comma-separated)")
      ->delimiter(',')
      ->check(CLI::Range(1, 64));
  app.add_option("--scatter-devices", a.scatter_devices,
                 "scatter case: the CUDA device of each worker, the first the engine's (0); workers on other devices "
                 "are replicas of the model (default: CUDA streams of device 0)")
      ->delimiter(',')
      ->check(CLI::Range(0, 1023));
  app.add_flag("--quiet", a.quiet, "no progress lines on stderr");
  tools::parse_or_exit(app, argc, argv);
  a.rag = cases == "rag" || cases == "all";
  a.cold = cases == "cold" || cases == "all";
  a.agent = cases == "agent" || cases == "all";
  a.tiers = cases == "tiers";
  a.state = cases == "state";
  a.scatter = cases == "scatter";
  a.modes = mode == "all" ? kMainModes : std::vector<CacheMode>{parse_mode(mode)};
  if (a.config.empty() == a.model.empty()) usage("give --config CONFIG.json (random weights, CUDA) or --model DIR");
  if (!a.config.empty() && a.device != "cuda") usage("random weights (--config) are generated on the GPU: --device cuda");
  if (a.chunks_max < a.chunks_min || a.chunks_max > a.pool) usage("need --chunks-min <= --chunks-max <= --pool");
  return a;
}

std::vector<int> random_ids(int64_t n, int64_t V, std::mt19937_64& rng) {
  std::uniform_int_distribution<int> d(0, static_cast<int>(V) - 1);
  std::vector<int> v(static_cast<size_t>(n));
  for (auto& x : v) x = d(rng);
  return v;
}

// ~n tokens: uniform in [7n/8, 9n/8], at least 1.
int64_t about(int64_t n, std::mt19937_64& rng) {
  std::uniform_int_distribution<int64_t> len(n * 7 / 8, n * 9 / 8);
  return std::max<int64_t>(1, len(rng));
}

using Request = std::vector<std::vector<int>>;  // blocks, the last the query

// The RAG request sequence: every request is [system, tools, chunk..., question].
std::vector<Request> make_workload(const Args& a, int64_t V) {
  std::mt19937_64 rng(a.seed);
  const auto system = random_ids(a.system, V, rng), tools = random_ids(a.tools, V, rng);
  std::vector<std::vector<int>> pool;
  for (int i = 0; i < a.pool; ++i) pool.push_back(random_ids(about(a.chunk_tokens, rng), V, rng));
  std::vector<Request> reqs;
  std::uniform_int_distribution<int> k_of(a.chunks_min, a.chunks_max);
  std::vector<int> order(static_cast<size_t>(a.pool));
  for (int r = 0; r < a.warmup + a.requests; ++r) {
    for (int i = 0; i < a.pool; ++i) order[i] = i;
    std::shuffle(order.begin(), order.end(), rng);  // the top-k of a retriever, in its ranking order
    Request blocks = {system, tools};
    const int k = k_of(rng);
    for (int i = 0; i < k; ++i) blocks.push_back(pool[order[i]]);
    blocks.push_back(random_ids(a.question, V, rng));
    reqs.push_back(std::move(blocks));
  }
  return reqs;
}

int64_t request_tokens(const Request& r) {
  int64_t n = 0;
  for (auto& b : r) n += static_cast<int64_t>(b.size());
  return n;
}

// The agent conversation's fixed text: system, tools, a user message per turn, a tool result per turn
// after the first. Its own generator (a pure function of --seed too).
struct AgentWorkload {
  std::vector<int> system, tools;
  std::vector<std::vector<int>> users, tool_results;  // [turns], [turns - 1]
};

AgentWorkload make_agent_workload(const Args& a, int64_t V) {
  std::mt19937_64 rng(a.seed ^ 0x6167656e74ull);  // "agent"
  AgentWorkload w;
  w.system = random_ids(a.system, V, rng);
  w.tools = random_ids(a.tools, V, rng);
  for (int t = 0; t < a.turns; ++t) {
    if (t > 0) w.tool_results.push_back(random_ids(about(a.tool_tokens, rng), V, rng));
    w.users.push_back(random_ids(a.question, V, rng));
  }
  return w;
}

struct Turn {
  int64_t prompt_tokens = 0, new_tokens = 0, reused_tokens = 0, computed_tokens = 0;
  double ttft_ms = 0, decode_ms = 0;
  int64_t decode_steps = 0;
};

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

int argmax(const std::vector<float>& v) { return static_cast<int>(std::max_element(v.begin(), v.end()) - v.begin()); }

// One conversation of `turns` turns on `engine`, continuing the live sequence from turn 2 on.
std::vector<Turn> run_conversation(Engine& engine, const AgentWorkload& w, int turns, int64_t reply_tokens,
                                   const char* label, bool quiet) {
  std::vector<Turn> out;
  std::vector<PromptBlock> blocks = {{w.system}, {w.tools}, {w.users[0]}};
  LiveSequence live;
  std::vector<int> reply;
  for (int t = 0; t < turns; ++t) {
    if (t > 0) {
      std::vector<int>& query = blocks.back().tokens;  // becomes a cached block: user message + reply
      query.insert(query.end(), reply.begin(), reply.end());
      blocks.push_back({w.tool_results[t - 1]});
      blocks.push_back({w.users[t]});
    }
    Turn turn;
    const int64_t run_before = static_cast<int64_t>(live.tokens.size());
    PromptResult r = engine.run(blocks, t > 0 ? &live : nullptr);
    turn.prompt_tokens = r.prompt_tokens;
    turn.new_tokens = r.prompt_tokens - run_before;
    turn.reused_tokens = r.reused_tokens;
    turn.computed_tokens = r.computed_tokens;
    turn.ttft_ms = r.ttft_ms;

    // Greedy reply: the first token from the prompt's logits, each further one after running the last.
    reply.clear();
    std::vector<float> logits = std::move(r.logits);
    const auto t0 = std::chrono::steady_clock::now();
    for (int64_t i = 0; i < reply_tokens; ++i) {
      reply.push_back(argmax(logits));
      if (i + 1 == reply_tokens) break;
      const int one[1] = {reply.back()};
      logits = engine.forward(one, *r.state);  // host logits: ends after the device finished
      ++turn.decode_steps;
    }
    turn.decode_ms = 1e3 * seconds_since(t0);

    // Everything run so far: the prompt and the reply but its last (sampled, not yet run) token.
    std::vector<int> transcript = prompt_tokens(blocks);
    transcript.insert(transcript.end(), reply.begin(), reply.end() - 1);
    if (r.state->length != static_cast<int64_t>(transcript.size()))
      throw std::runtime_error("agent: state length " + std::to_string(r.state->length) + " != transcript " +
                               std::to_string(transcript.size()));
    live = LiveSequence{std::move(r.state), std::move(transcript)};

    if (!quiet) std::fprintf(stderr,
                 "[%s] %s turn %d: %lld prompt tokens, %lld new, %lld reused, %lld computed, %.1f ms, "
                 "decode %.2f ms/token\n",
                 mode_name(engine.mode()), label, t + 1, static_cast<long long>(turn.prompt_tokens),
                 static_cast<long long>(turn.new_tokens), static_cast<long long>(turn.reused_tokens),
                 static_cast<long long>(turn.computed_tokens), turn.ttft_ms,
                 turn.decode_steps ? turn.decode_ms / turn.decode_steps : 0.0);
    out.push_back(turn);
  }
  return out;
}

double percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  const double at = p * (v.size() - 1);
  const size_t lo = static_cast<size_t>(at), hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (at - lo) * (v[hi] - v[lo]);
}

double mean_of(const std::vector<double>& v) {
  double m = 0;
  for (double x : v) m += x / v.size();
  return m;
}

// Device memory in use (CUDA; 0 on the CPU, where the store's own byte count is the measure).
size_t device_used_bytes(const Backend& b) {
#ifdef HYPIC_WITH_CUDA
  if (b.device() == Device::Cuda) {
    size_t free = 0, total = 0;
    HYPIC_CUDA_CHECK(cudaMemGetInfo(&free, &total));
    return total - free;
  }
#endif
  return 0;
}

// Decode-graph captures so far (CUDA; 0 elsewhere).
int64_t graph_captures(Backend& b) {
#ifdef HYPIC_WITH_CUDA
  if (auto* c = dynamic_cast<CudaBackend*>(&b)) return c->model().decode_graph_captures();
#endif
  return 0;
}

void print_list(const std::vector<double>& v, const char* fmt) {
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) std::printf(", ");
    std::printf(fmt, v[i]);
  }
}

// Opens (start) or closes the CUDA profiler's range around one request when `on` (a no-op without CUDA).
void profiler_range(bool on, bool start) {
  if (!on) return;
#ifdef HYPIC_WITH_CUDA
  HYPIC_CUDA_CHECK(cudaDeviceSynchronize());
  HYPIC_CUDA_CHECK(start ? cudaProfilerStart() : cudaProfilerStop());
#else
  (void)start;
#endif
}

// ---- the cases (each prints `,\n  "key": {...}`) ----

void rag_case(const Args& a, Backend& backend, const EngineOptions& opt, const std::vector<Request>& reqs) {
  std::printf(",\n  \"rag\": {\"modes\": [");
  for (size_t mi = 0; mi < a.modes.size(); ++mi) {
    const CacheMode mode = a.modes[mi];
    const auto t_mode = std::chrono::steady_clock::now();
    Engine engine(backend, mode, opt);
    std::vector<double> ttft;
    double computed = 0, hits = 0, blocks = 0;
    for (int r = 0; r < a.warmup + a.requests; ++r) {
      profiler_range(r == a.profile_request, true);
      const PromptResult res = engine.run(reqs[r]);
      profiler_range(r == a.profile_request, false);
      const bool measured = r >= a.warmup;
      int64_t h = 0;
      for (auto& b : res.blocks) h += b.hit;
      if (!a.quiet) std::fprintf(stderr, "[%s] rag %s request %d: %lld prompt tokens, %lld computed, %lld/%zu blocks hit, %.1f ms\n",
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
    std::printf("%s\n    {\"mode\": \"%s\", \"ttft_ms\": {\"p50\": %.2f, \"p90\": %.2f, \"mean\": %.2f, \"min\": %.2f, "
                "\"max\": %.2f}, \"mean_computed_tokens\": %.1f, \"hit_rate\": %.3f, \"cache_bytes\": %zu, "
                "\"cache_entries\": %zu, \"evictions\": %lld, \"device_bytes_in_use\": %zu, \"mode_seconds\": %.1f, "
                "\"ttft_ms_per_request\": [",
                mi ? "," : "", mode_name(mode), percentile(ttft, 0.5), percentile(ttft, 0.9), mean_of(ttft),
                *std::min_element(ttft.begin(), ttft.end()), *std::max_element(ttft.begin(), ttft.end()), computed,
                blocks > 0 ? hits / blocks : 0.0, st.bytes, st.entries, static_cast<long long>(st.evictions),
                device_used_bytes(backend), seconds_since(t_mode));
    print_list(ttft, "%.1f");
    std::printf("]}");
    std::fflush(stdout);
  }
  std::printf("\n  ]}");
  std::fflush(stdout);
}

void cold_case(const Args& a, Backend& backend, const EngineOptions& opt, const std::vector<Request>& reqs) {
  const size_t nm = kMainModes.size();
  // The warm-up request: the longest measured one, so that the scratch pool holds its largest sizes.
  int longest = a.warmup;
  for (int r = a.warmup; r < a.warmup + a.requests; ++r)
    if (request_tokens(reqs[r]) > request_tokens(reqs[longest])) longest = r;
  for (CacheMode mode : kMainModes) {
    Engine engine(backend, mode, opt);
    const PromptResult res = engine.run(reqs[longest]);
    if (!a.quiet) std::fprintf(stderr, "[%s] cold warm-up (request %d): %lld prompt tokens, %.1f ms\n", mode_name(mode), longest,
                 static_cast<long long>(res.prompt_tokens), res.ttft_ms);
  }
  backend.sync();
  const size_t bytes_before = device_used_bytes(backend);

  std::vector<std::vector<double>> ttft(nm), computed(nm);
  std::vector<double> prompt;
  for (int i = 0; i < a.requests; ++i) {
    const Request& req = reqs[a.warmup + i];
    prompt.push_back(static_cast<double>(request_tokens(req)));
    std::vector<std::vector<double>> runs(nm);
    for (int rep = 0; rep < a.repeats; ++rep)
      for (size_t mi = 0; mi < nm; ++mi) {
        Engine engine(backend, kMainModes[mi], opt);  // empty store; destroyed (entries freed) at scope end
        const PromptResult res = engine.run(req);
        runs[mi].push_back(res.ttft_ms);
        if (rep == 0) computed[mi].push_back(static_cast<double>(res.computed_tokens));
        if (!a.quiet) std::fprintf(stderr, "[%s] cold request %d (run %d): %lld prompt tokens, %lld computed, %.1f ms\n",
                     mode_name(kMainModes[mi]), a.warmup + i, rep + 1, static_cast<long long>(res.prompt_tokens),
                     static_cast<long long>(res.computed_tokens), res.ttft_ms);
      }
    for (size_t mi = 0; mi < nm; ++mi) ttft[mi].push_back(percentile(runs[mi], 0.5));
  }
  backend.sync();
  const size_t bytes_after = device_used_bytes(backend);

  std::printf(",\n  \"cold\": {\"requests\": %d, \"repeats\": %d, \"warmup_request\": %d, \"device_bytes_in_use\": {\"before\": %zu, "
              "\"after\": %zu},\n    \"prompt_tokens_per_request\": [",
              a.requests, a.repeats, longest, bytes_before, bytes_after);
  print_list(prompt, "%.0f");
  std::printf("],\n    \"modes\": [");
  for (size_t mi = 0; mi < nm; ++mi) {
    const auto& t = ttft[mi];
    std::printf("%s\n      {\"mode\": \"%s\", \"ttft_ms\": {\"p50\": %.2f, \"mean\": %.2f, \"min\": %.2f, \"max\": %.2f}, "
                "\"mean_computed_tokens\": %.1f, \"ttft_ms_per_request\": [",
                mi ? "," : "", mode_name(kMainModes[mi]), percentile(t, 0.5), mean_of(t),
                *std::min_element(t.begin(), t.end()), *std::max_element(t.begin(), t.end()), mean_of(computed[mi]));
    print_list(t, "%.1f");
    std::printf("]}");
  }
  std::printf("\n    ],\n    \"ratio_to_full\": {");
  for (size_t mi = 1; mi < nm; ++mi) {  // kMainModes[0] is full
    std::vector<double> ratio;
    for (int i = 0; i < a.requests; ++i) ratio.push_back(ttft[mi][i] / ttft[0][i]);
    std::printf("%s\n      \"%s\": {\"mean\": %.4f, \"max\": %.4f, \"per_request\": [", mi > 1 ? "," : "",
                mode_name(kMainModes[mi]), mean_of(ratio), *std::max_element(ratio.begin(), ratio.end()));
    print_list(ratio, "%.4f");
    std::printf("]}");
  }
  std::printf("\n    }\n  }");
  std::fflush(stdout);
}

void agent_case(const Args& a, Backend& backend, const EngineOptions& opt) {
  const AgentWorkload w = make_agent_workload(a, backend.config().vocab_size);
  for (CacheMode mode : kMainModes) {  // throwaway: kernels, scratch pool, decode graph, a live continuation
    Engine engine(backend, mode, opt);
    run_conversation(engine, w, std::min(a.turns, 2), a.reply_tokens, "warm-up", a.quiet);
  }
  std::printf(",\n  \"agent\": {\"workload\": {\"system\": %lld, \"tools\": %lld, \"question\": %lld, "
              "\"tool_tokens\": %lld, \"reply_tokens\": %lld, \"turns\": %d, \"seed\": %llu},\n    \"modes\": [",
              static_cast<long long>(a.system), static_cast<long long>(a.tools), static_cast<long long>(a.question),
              static_cast<long long>(a.tool_tokens), static_cast<long long>(a.reply_tokens), a.turns,
              static_cast<unsigned long long>(a.seed));
  for (size_t mi = 0; mi < kMainModes.size(); ++mi) {
    const CacheMode mode = kMainModes[mi];
    const int64_t captures0 = graph_captures(backend);
    std::vector<Turn> turns;
    {
      Engine engine(backend, mode, opt);
      turns = run_conversation(engine, w, a.turns, a.reply_tokens, "measured", a.quiet);
    }
    // From turn 2 on, only the new tokens run (the live sequence continued exactly)?
    bool only_new = a.turns > 1;
    std::vector<double> later;
    for (size_t t = 1; t < turns.size(); ++t) {
      const Turn& u = turns[t];
      only_new = only_new && u.computed_tokens == u.new_tokens && u.computed_tokens == u.prompt_tokens - u.reused_tokens;
      later.push_back(u.ttft_ms);
    }
    std::printf("%s\n      {\"mode\": \"%s\", \"computed_only_new_tokens_after_turn_1\": %s, \"ttft_ms\": {\"turn_1\": "
                "%.2f, \"last\": %.2f, \"mean_after_turn_1\": %.2f}, \"decode_graph_captures\": %lld, \"turns\": [",
                mi ? "," : "", mode_name(mode), only_new ? "true" : "false", turns.front().ttft_ms,
                turns.back().ttft_ms, later.empty() ? 0.0 : mean_of(later),
                static_cast<long long>(graph_captures(backend) - captures0));
    for (size_t t = 0; t < turns.size(); ++t) {
      const Turn& u = turns[t];
      std::printf("%s\n        {\"turn\": %zu, \"prompt_tokens\": %lld, \"new_tokens\": %lld, \"reused_tokens\": %lld, "
                  "\"computed_tokens\": %lld, \"ttft_ms\": %.2f, \"decode_ms_per_token\": %.3f}",
                  t ? "," : "", t + 1, static_cast<long long>(u.prompt_tokens), static_cast<long long>(u.new_tokens),
                  static_cast<long long>(u.reused_tokens), static_cast<long long>(u.computed_tokens), u.ttft_ms,
                  u.decode_steps ? u.decode_ms / u.decode_steps : 0.0);
    }
    std::printf("\n      ]}");
    std::fflush(stdout);
  }
  std::printf("\n    ]\n  }");
  std::fflush(stdout);
}

void tiers_case(const Args& a, Backend& backend, const EngineOptions& base, const std::vector<Request>& reqs) {
  const EntryCodecOptions format = parse_cache_format(a.tier_format);
  std::vector<Request> warm(reqs.begin() + a.warmup, reqs.begin() + a.warmup + a.requests), measured = warm;
  std::mt19937_64 rng(a.seed ^ 0x7469657273ull);  // "tiers"
  for (Request& r : measured) {
    std::reverse(r.begin() + 2, r.end() - 1);  // chunks in another order: no chain entry applies
    r.back() = random_ids(a.question, backend.config().vocab_size, rng);
  }
  char tmpl[] = "/tmp/hypic_bench_tiers_XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  struct Tier {
    const char* name;
    std::vector<double> ttft, computed;
    double hits = 0, blocks = 0;
    EntryTierStats stats;
  };
  std::vector<Tier> tiers = {{"device"}, {"host"}, {"disk"}, {"recompute"}};
  size_t record_bytes = 0, device_bytes = 0;
  for (Tier& t : tiers) {
    const std::string name = t.name;
    EngineOptions o = base;
    o.tiers.codec = format;
    if (name == "host" || name == "disk") o.cache_budget_bytes = 1;  // nothing stays on the device
    if (name == "host") o.tiers.host_budget_bytes = static_cast<size_t>(a.budget_gb * 1e9);
    if (name == "disk") o.tiers.disk = sdk::CacheDir::open(dir + "/cache");
    std::unique_ptr<Engine> engine = std::make_unique<Engine>(backend, CacheMode::Hypic, o);
    if (name != "recompute")
      for (const Request& r : warm) engine->run(r);
    for (size_t i = 0; i < measured.size(); ++i) {
      if (name == "recompute") engine = std::make_unique<Engine>(backend, CacheMode::Hypic, o);
      const PromptResult res = engine->run(measured[i]);
      t.ttft.push_back(res.ttft_ms);
      t.computed.push_back(static_cast<double>(res.computed_tokens));
      for (auto& b : res.blocks) {
        t.hits += b.hit;
        ++t.blocks;
      }
      if (!a.quiet) std::fprintf(stderr, "[tiers] %s request %zu: %lld prompt tokens, %lld computed, %.1f ms\n", t.name, i,
                                 static_cast<long long>(res.prompt_tokens), static_cast<long long>(res.computed_tokens),
                                 res.ttft_ms);
    }
    if (engine->tiers()) {
      t.stats = engine->tiers()->stats();
      if (t.stats.device_bytes_encoded) {
        record_bytes = t.stats.record_bytes;
        device_bytes = t.stats.device_bytes_encoded;
      }
    }
  }
  std::filesystem::remove_all(dir);
  // Record bytes of one chunk of --chunk-tokens tokens, from the shape (docs/cache_tiers.md).
  const ModelConfig& c = backend.config();
  std::printf(",\n  \"tiers\": {\"format\": \"%s\", \"record_bytes_per_chunk\": {\"fp32\": %zu, \"bf16\": %zu, "
              "\"compact\": %zu}, \"encoded_device_bytes\": %zu, \"record_bytes\": %zu,\n    \"tiers\": [",
              a.tier_format.c_str(), content_record_bytes(c, backend.kv_dtype(), a.chunk_tokens, parse_cache_format("fp32")),
              content_record_bytes(c, backend.kv_dtype(), a.chunk_tokens, parse_cache_format("bf16")),
              content_record_bytes(c, backend.kv_dtype(), a.chunk_tokens, parse_cache_format("compact")), device_bytes,
              record_bytes);
  for (size_t i = 0; i < tiers.size(); ++i) {
    const Tier& t = tiers[i];
    std::printf("%s\n      {\"tier\": \"%s\", \"ttft_ms\": {\"p50\": %.2f, \"mean\": %.2f, \"min\": %.2f, \"max\": %.2f}, "
                "\"mean_computed_tokens\": %.1f, \"hit_rate\": %.3f, \"host_hits\": %lld, \"disk_hits\": %lld, "
                "\"ttft_ms_per_request\": [",
                i ? "," : "", t.name, percentile(t.ttft, 0.5), mean_of(t.ttft),
                *std::min_element(t.ttft.begin(), t.ttft.end()), *std::max_element(t.ttft.begin(), t.ttft.end()),
                mean_of(t.computed), t.blocks > 0 ? t.hits / t.blocks : 0.0, static_cast<long long>(t.stats.host_hits),
                static_cast<long long>(t.stats.disk_hits));
    print_list(t.ttft, "%.1f");
    std::printf("]}");
  }
  std::printf("\n    ]\n  }");
  std::fflush(stdout);
}

// ||a - b||^2 and ||b||^2 accumulated in double.
void add_diff(const std::vector<float>& a, const std::vector<float>& b, double& diff2, double& ref2) {
  if (a.size() != b.size()) throw std::runtime_error("state: arrays of different sizes");
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = static_cast<double>(a[i]) - b[i];
    diff2 += d * d;
    ref2 += static_cast<double>(b[i]) * b[i];
  }
}

// Per layer: the relative distance of `s` from the reference `ref` (linear: S; attention: K and V rows
// matched by position).
std::vector<double> layer_errors(const ModelConfig& cfg, const SequenceState& s, const SequenceState& ref) {
  std::vector<double> out;
  for (size_t l = 0; l < ref.layers.size(); ++l) {
    double diff2 = 0, ref2 = 0;
    if (cfg.layer_kinds[l] == LayerKind::LinearAttention) {
      add_diff(s.layers[l].lin.S, ref.layers[l].lin.S, diff2, ref2);
    } else {
      const AttentionLayerState &x = s.layers[l].attn, &y = ref.layers[l].attn;
      if (x.rows() != y.rows()) throw std::runtime_error("state: K/V rows differ at layer " + std::to_string(l));
      const size_t w = y.rows() ? y.k.size() / static_cast<size_t>(y.rows()) : 0;
      std::vector<size_t> at(static_cast<size_t>(y.rows()));
      for (int64_t i = 0; i < y.rows(); ++i) at[static_cast<size_t>(y.pos[i])] = static_cast<size_t>(i);
      for (int64_t i = 0; i < x.rows(); ++i) {
        const size_t j = at.at(static_cast<size_t>(x.pos[i]));
        for (size_t c = 0; c < w; ++c) {
          const double dk = static_cast<double>(x.k[i * w + c]) - y.k[j * w + c];
          const double dv = static_cast<double>(x.v[i * w + c]) - y.v[j * w + c];
          diff2 += dk * dk + dv * dv;
          ref2 += static_cast<double>(y.k[j * w + c]) * y.k[j * w + c] + static_cast<double>(y.v[j * w + c]) * y.v[j * w + c];
        }
      }
    }
    out.push_back(ref2 > 0 ? std::sqrt(diff2 / ref2) : std::sqrt(diff2));
  }
  return out;
}

void state_case(const Args& a, Backend& backend, const EngineOptions& opt, const std::vector<Request>& reqs) {
  const ModelConfig& cfg = backend.config();
  const std::vector<CacheMode> modes = {CacheMode::Hypic, CacheMode::Naive, CacheMode::NoSeam};
  const size_t L = static_cast<size_t>(cfg.num_layers), nm = modes.size();
  std::vector<std::vector<double>> err(nm, std::vector<double>(L, 0.0));
  std::vector<double> kl(nm, 0.0), top1(nm, 0.0), composed(nm, 0.0);
  for (int i = 0; i < a.requests; ++i) {
    const Request& req = reqs[a.warmup + i];
    Request reversed = req;  // system, tools, chunks reversed, the same question
    std::reverse(reversed.begin() + 2, reversed.end() - 1);
    std::unique_ptr<SequenceState> ref;
    std::vector<float> ref_logits;
    {
      Engine full(backend, CacheMode::Full, opt);
      PromptResult r = full.run(req);
      ref = backend.to_host(*r.state);
      ref_logits = std::move(r.logits);
    }
    for (size_t mi = 0; mi < nm; ++mi) {
      Engine engine(backend, modes[mi], opt);
      engine.run(reversed);
      PromptResult r = engine.run(req);
      int64_t hits = 0;
      for (const auto& b : r.blocks) hits += b.hit ? 1 : 0;
      composed[mi] += static_cast<double>(hits) / static_cast<double>(r.blocks.size()) / a.requests;
      const auto e = layer_errors(cfg, *backend.to_host(*r.state), *ref);
      for (size_t l = 0; l < L; ++l) err[mi][l] += e[l] / a.requests;
      kl[mi] += cpu::kl_divergence(ref_logits.data(), r.logits.data(), static_cast<int64_t>(ref_logits.size())) /
                a.requests;
      top1[mi] += (argmax(r.logits) == argmax(ref_logits) ? 1.0 : 0.0) / a.requests;
      if (!a.quiet) std::fprintf(stderr, "[%s] state request %d: %lld prompt tokens, layer 0 error %.3g, last layer %.3g\n",
                                 mode_name(modes[mi]), a.warmup + i, static_cast<long long>(r.prompt_tokens), e[0], e[L - 1]);
    }
  }
  std::printf(",\n  \"state\": {\"requests\": %d, \"modes\": [", a.requests);
  for (size_t mi = 0; mi < nm; ++mi) {
    std::printf("%s\n    {\"mode\": \"%s\", \"block_hit_rate\": %.3f, \"first_token_kl\": %.4g, \"top1_agree\": %.3f, "
                "\"error_by_layer\": [", mi ? "," : "", mode_name(modes[mi]), composed[mi], kl[mi], top1[mi]);
    print_list(err[mi], "%.4g");
    std::printf("]}");
  }
  std::printf("\n  ], \"layer_kinds\": [");
  for (size_t l = 0; l < L; ++l)
    std::printf("%s\"%s\"", l ? ", " : "", cfg.layer_kinds[l] == LayerKind::LinearAttention ? "linear" : "attention");
  std::printf("]}");
  std::fflush(stdout);
}


void scatter_case(const Args& a, Backend& backend, const EngineOptions& opt) {
  if (!a.scatter_devices.empty() && a.scatter_devices[0] != 0)
    throw InvalidArgument("--scatter-devices: the first worker is the engine's backend, on device 0");
  const int64_t V = backend.config().vocab_size;
  std::mt19937_64 rng(a.seed * 7919 + 17);
  const std::vector<double> share = {0.30, 0.02, 0.20, 0.03, 0.12, 0.04, 0.10, 0.05, 0.08, 0.06};
  const int64_t docs = std::max<int64_t>(a.scatter_tokens - a.system - a.question, 64);
  std::vector<PromptBlock> req;
  req.push_back({random_ids(a.system, V, rng), BlockCache::Cache});
  for (double f : share)
    req.push_back({random_ids(std::max<int64_t>(16, static_cast<int64_t>(f * static_cast<double>(docs))), V, rng),
                   BlockCache::Cache});
  req.push_back({random_ids(a.question, V, rng), BlockCache::Cache});
  int64_t prompt = 0;
  for (auto& b : req) prompt += static_cast<int64_t>(b.tokens.size());

  int max_workers = 1;
  for (int w : a.workers) max_workers = std::max(max_workers, w);
  if (!a.scatter_devices.empty() && static_cast<int>(a.scatter_devices.size()) < max_workers)
    throw InvalidArgument("--scatter-devices names fewer devices than the largest --workers count");
  std::vector<std::unique_ptr<Backend>> siblings;
  for (int i = 1; i < max_workers; ++i) {
    const int dev = a.scatter_devices.empty() ? 0 : a.scatter_devices[static_cast<size_t>(i)];
    if (dev == 0) {
      siblings.push_back(backend.worker());
    } else if (!a.model.empty()) {
      siblings.push_back(open_backend_on(a.model, dev));
    } else {
      std::string path = a.config;
      if (std::filesystem::is_directory(path)) path = (std::filesystem::path(path) / "config.json").string();
      siblings.push_back(random_backend_on(ModelConfig::load(path), a.seed, dev));
    }
    if (!siblings.back()) throw InvalidArgument("this backend has no workers (Backend::worker)");
  }
  auto workers_of = [&](int W) {
    std::vector<Backend*> w = {&backend};
    for (int i = 1; i < W; ++i) w.push_back(siblings[static_cast<size_t>(i - 1)].get());
    return w;
  };
  struct Run {
    double scatter = 0, gather = 0, stitch = 0, total = 0;
    std::vector<double> worker;
    std::vector<int64_t> worker_tokens;
    int64_t makespan_cost = 0, computed = 0;
  };
  auto one_run = [&](int W, Placement how) {
    Engine engine(backend, CacheMode::Hypic, opt);
    Run r;
    if (W == 0) {  // run()'s own cold path
      const PromptResult res = engine.run(req);
      r.stitch = r.total = res.ttft_ms;
      r.computed = res.computed_tokens;
      return r;
    }
    ColdScatter scatter(engine, workers_of(W), how);
    const ScatterReport rep = scatter.prefill_missing(req);
    const PromptResult res = engine.run(req);
    r.scatter = rep.scatter_ms;
    r.gather = rep.gather_ms;
    r.stitch = res.ttft_ms;
    r.total = rep.scatter_ms + res.ttft_ms;
    r.worker = rep.worker_ms;
    r.worker_tokens = rep.worker_tokens;
    r.makespan_cost = rep.makespan_cost;
    r.computed = res.computed_tokens;
    return r;
  };
  // Warm-up: every worker's kernels and scratch pool at this request's sizes.
  one_run(0, Placement::Lpt);
  for (int W : a.workers) one_run(W, Placement::Lpt);
  backend.sync();

  auto median_run = [&](int W, Placement how) {
    std::vector<Run> runs;
    for (int rep = 0; rep < a.repeats; ++rep) runs.push_back(one_run(W, how));
    std::sort(runs.begin(), runs.end(), [](const Run& x, const Run& y) { return x.total < y.total; });
    const Run& m = runs[runs.size() / 2];
    if (!a.quiet)
      std::fprintf(stderr, "[scatter] %s workers %d: scatter %.1f ms (gather %.1f) + stitch %.1f ms = %.1f ms\n",
                   W ? placement_name(how) : "one-pass", W, m.scatter, m.gather, m.stitch, m.total);
    return m;
  };
  const Run base = median_run(0, Placement::Lpt);
  std::printf(",\n  \"scatter\": {\"prompt_tokens\": %lld, \"worker_devices\": [", static_cast<long long>(prompt));
  for (int i = 0; i < max_workers; ++i)
    std::printf("%s%d", i ? ", " : "", a.scatter_devices.empty() ? 0 : a.scatter_devices[static_cast<size_t>(i)]);
  std::printf("], \"blocks\": [");
  for (size_t i = 0; i + 1 < req.size(); ++i) std::printf("%s%zu", i ? ", " : "", req[i].tokens.size());
  std::printf("], \"repeats\": %d,\n    \"one_pass\": {\"ttft_ms\": %.2f, \"computed_tokens\": %lld},\n    \"runs\": [",
              a.repeats, base.total, static_cast<long long>(base.computed));
  bool first = true;
  for (Placement how : {Placement::Lpt, Placement::RoundRobin}) {
    double t1 = 0;
    for (int W : a.workers) {
      const Run r = median_run(W, how);
      if (W == 1) t1 = r.scatter;
      std::printf("%s\n      {\"placement\": \"%s\", \"workers\": %d, \"scatter_ms\": %.2f, \"gather_ms\": %.2f, "
                  "\"stitch_ms\": %.2f, \"ttft_ms\": %.2f, \"stitch_computed_tokens\": %lld, \"makespan_cost\": %lld, "
                  "\"scaling\": %s, \"worker_ms\": [",
                  first ? "" : ",", placement_name(how), W, r.scatter, r.gather, r.stitch, r.total,
                  static_cast<long long>(r.computed), static_cast<long long>(r.makespan_cost),
                  t1 > 0 ? std::to_string(t1 / (W * r.scatter)).c_str() : "null");
      first = false;
      for (size_t i = 0; i < r.worker.size(); ++i) std::printf("%s%.1f", i ? ", " : "", r.worker[i]);
      std::printf("], \"worker_tokens\": [");
      for (size_t i = 0; i < r.worker_tokens.size(); ++i)
        std::printf("%s%lld", i ? ", " : "", static_cast<long long>(r.worker_tokens[i]));
      std::printf("]}");
    }
  }
  std::printf("\n    ]\n  }");
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse(argc, argv);
  try {
    const auto t_load = std::chrono::steady_clock::now();
    std::unique_ptr<Backend> backend;
    std::string what;
    size_t weight_bytes = 0;
    if (!a.model.empty()) {
      backend = open_backend(a.model, resolve_device(a.device));
      what = a.model;
    } else {
      std::string path = a.config;
      if (std::filesystem::is_directory(path)) path = (std::filesystem::path(path) / "config.json").string();
      backend = random_backend(ModelConfig::load(path), a.seed, resolve_device(a.device));
      what = "random weights, " + a.config;
    }
    backend->sync();
#ifdef HYPIC_WITH_CUDA
    if (auto* c = dynamic_cast<CudaBackend*>(backend.get())) weight_bytes = c->model().weight_bytes();
#endif
    const double load_s = seconds_since(t_load);
    const int64_t V = backend->config().vocab_size;

    EngineOptions opt;
    opt.seam_width = a.seam;
    opt.cache_budget_bytes = static_cast<size_t>(a.budget_gb * 1e9);
    opt.warm_up_rows = a.device == "cpu" ? 0 : a.warm_up_rows;
    std::printf("{\n  \"model\": \"%s\", \"device\": \"%s\",\n  \"weight_bytes\": %zu, \"load_seconds\": %.1f",
                what.c_str(), device_name(backend->device()), weight_bytes, load_s);
    std::vector<Request> reqs;
    if (a.rag || a.cold || a.tiers || a.state) {
      reqs = make_workload(a, V);
      double mean_prompt = 0;
      for (int r = a.warmup; r < a.warmup + a.requests; ++r)
        mean_prompt += static_cast<double>(request_tokens(reqs[r])) / a.requests;
      std::printf(",\n  \"workload\": {\"system\": %lld, \"tools\": %lld, \"pool\": %d, \"chunk_tokens\": %lld, "
                  "\"chunks_per_request\": [%d, %d], \"question\": %lld, \"warmup\": %d, \"requests\": %d, "
                  "\"mean_prompt_tokens\": %.1f, \"seam_width\": %lld, \"cache_budget_bytes\": %zu, \"seed\": %llu}",
                  static_cast<long long>(a.system), static_cast<long long>(a.tools), a.pool,
                  static_cast<long long>(a.chunk_tokens), a.chunks_min, a.chunks_max,
                  static_cast<long long>(a.question), a.warmup, a.requests, mean_prompt,
                  static_cast<long long>(a.seam), opt.cache_budget_bytes, static_cast<unsigned long long>(a.seed));
    }
    std::fflush(stdout);
    if (a.rag) rag_case(a, *backend, opt, reqs);
    if (a.cold) cold_case(a, *backend, opt, reqs);
    if (a.agent) agent_case(a, *backend, opt);
    if (a.tiers) tiers_case(a, *backend, opt, reqs);
    if (a.state) state_case(a, *backend, opt, reqs);
    if (a.scatter) scatter_case(a, *backend, opt);
    std::printf("\n}\n");
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "hypic_bench_ttft: %s\n", e.what());
    return 1;
  }
  return 0;
}
