// Whole-model throughput of the CUDA backend (runtime/cuda/cuda_backend.h) driven by the engine in full
// mode (runtime/engine.h, Engine::forward), printed as one JSON object:
// prefill tokens/s of one sequence from position 0, then decode tokens/s at batch 1 continuing it, and
// each as a fraction of the device's limits:
//   prefill: model FLOPs (projections, attention scores/values, chunked delta rule) per second over the
//     measured bf16 GEMM rate (--peak-tflops, default 790 for an H200);
//   decode: bytes read per token (every weight a token touches: the non-expert matrices, the top-k
//     experts of each MoE layer, the LM head; plus the recurrent states, conv tails and the KV cache at
//     that step's context length) per second over HBM bandwidth (--peak-tbps, default 4.3), and over the
//     device-to-device copy rate measured at the start of the run ("copy_tb_per_s": bytes read plus bytes
//     written by cudaMemcpyAsync of 1 GiB, the best of 20 copies), the bound of the machine it ran on.
// The prefill is timed --prefill-repeats times from fresh states ("seconds" the first, "best_seconds" the
// fastest), then once more queued behind a wait on the stream ("device_seconds": the device alone, its
// kernels back to back; the wall time less this is what the device spent waiting or at lower clocks).
// Usage:
//   hypic_bench_model --config CONFIG.json --random-weights [--prefill 8192] [--decode 128] [--seed 1]
//                     [--batch 1,8,32 [--batch-steps 32]]   (batched decode: N sequences per step)
//   hypic_bench_model --model DIR [--prefill N] [--decode N]      (--help lists every option)
#include <cuda_runtime.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "kernels/cuda/check.h"
#include "kernels/cuda/memory.h"
#include "kernels/cuda/spin.h"
#include "runtime/cuda/cuda_backend.h"
#include "runtime/engine.h"
#include "runtime/error.h"
#include "runtime/model_config.h"
#include "tools/common/options.h"

using namespace hypic;

namespace {

struct Args {
  std::string config, model;
  bool random_weights = false;
  int64_t prefill = 8192, decode = 128;
  std::vector<int64_t> batch;  // batched decode sizes (continuous batching), none by default
  int64_t batch_steps = 32;
  int64_t prefill_repeats = 3;
  uint64_t seed = 1;
  double peak_tflops = 790.0, peak_tbps = 4.3;
};

[[noreturn]] void usage(const std::string& why) {
  std::fprintf(stderr, "hypic_bench_model: %s\nRun with --help for the options.\n", why.c_str());
  std::exit(2);
}

// Every option declared once (tools/common/options.h): --help lists them with their defaults.
Args parse(int argc, char** argv) {
  Args a;
  CLI::App app("Whole-model prefill and decode throughput of the CUDA backend (one JSON object on stdout)",
               "hypic_bench_model");
  tools::configure(app, /*uses_model=*/true);
  auto* config = app.add_option("--config", a.config, "CONFIG.json (or its folder), with --random-weights");
  auto* model = app.add_option("--model", a.model, "model directory (its weights)");
  app.add_flag("--random-weights", a.random_weights, "random weights of --config's shape")->needs(config)->excludes(model);
  tools::add_int<int64_t>(app, "--prefill", a.prefill, "prefill tokens", 1, int64_t{1} << 24);
  tools::add_int<int64_t>(app, "--decode", a.decode, "decode steps after the prefill", 0, int64_t{1} << 24);
  app.add_option("--batch", a.batch,
                 "also time batched decode steps (Engine::decode_batch) of N sequences at the prefill's context, "
                 "for each N given (e.g. --batch 1,8,32)")
      ->delimiter(',')
      ->check(CLI::Range(int64_t{1}, int64_t{4096}));
  tools::add_int<int64_t>(app, "--batch-steps", a.batch_steps, "timed steps per --batch size", 1, 1 << 20);
  tools::add_int<int64_t>(app, "--prefill-repeats", a.prefill_repeats,
                          "timed prefills, each from a fresh state (the first is \"seconds\"; all are listed)", 1, 100);
  tools::add_u64(app, "--seed", a.seed, "seed of --random-weights");
  app.add_option("--peak-tflops", a.peak_tflops, "the device's bf16 GEMM TFLOP/s")->check(CLI::Range(1e-6, 1e9));
  app.add_option("--peak-tbps", a.peak_tbps, "the device's memory bandwidth, TB/s")->check(CLI::Range(1e-6, 1e9));
  tools::parse_or_exit(app, argc, argv);
  if (!a.random_weights && a.model.empty()) usage("give --config CONFIG.json --random-weights, or --model DIR");
  return a;
}

// Multiply-adds count 2 FLOPs. Matrix parameters one token multiplies through (per layer kind).
struct Counts {
  double proj_params_per_token = 0;  // every projection a token runs through, LM head excluded
  double lm_head_params = 0;
  double weight_bytes_per_decode_token = 0;  // bf16 weights a decode step reads (incl. LM head, one embed row)
  double expert_bytes_per_layer = 0;         // bf16 weights of one routed expert of one MoE layer
  int64_t moe_layers = 0;
  double state_bytes = 0;                    // GDN states (fp32) + conv tails (bf16), read per step
  double kv_bytes_per_row = 0;               // bf16 K and V of one position, all attention layers
  double attn_flops_per_qk_pair = 0;         // QK^T and PV over all attention layers, per visible pair
  double gdn_flops_per_token = 0;            // chunked delta rule, all linear layers
};

Counts count(const ModelConfig& c) {
  Counts n;
  const double D = c.hidden_size, V = c.vocab_size;
  const double Hk = c.lin_k_heads, Hv = c.lin_v_heads, dk = c.lin_k_dim, dv = c.lin_v_dim;
  const double H = c.num_heads, Hkv = c.num_kv_heads, hd = c.head_dim, chunk = 64;
  double nonexpert = 0, expert_active = 0;
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const double W = Hv * dk;  // lightning / KDA: one width for q, k, v and the output
    if (c.layer_kinds[l] == LayerKind::LinearAttention && c.linear_kind == LinearKind::Lightning) {
      nonexpert += D * 4 * W + W * D;  // q | k | v, the gate, the output
      n.state_bytes += 4 * Hv * dk * dv;
      // Per token and head: Q S0 and K^T V (2 dk dv), in-chunk QK^T (C dk) and P V (C dv).
      n.gdn_flops_per_token += 2 * Hv * (2 * dk * dv + chunk * dk + chunk * dv);
    } else if (c.layer_kinds[l] == LayerKind::LinearAttention && c.linear_kind == LinearKind::Kda) {
      const double gates = c.kda_low_rank_gates ? 2 * (D * dk + dk * W) : 2 * D * W;
      nonexpert += D * 3 * W + gates + D * Hv + W * D;
      n.state_bytes += 4 * Hv * dk * dv + 2 * (c.conv_kernel - 1) * 3 * W;
      n.gdn_flops_per_token += 2 * Hv * (3 * dk * dv + 3 * chunk * dk + 2 * chunk * dv);  // as the delta rule
    } else if (c.layer_kinds[l] == LayerKind::LinearAttention) {
      nonexpert += D * (2 * Hk * dk + 2 * Hv * dv + 2 * Hv) + Hv * dv * D;
      n.state_bytes += 4 * Hv * dk * dv + 2 * (c.conv_kernel - 1) * (2 * Hk * dk + Hv * dv);
      // Per token and value head: Q S0, W S0, K^T Vn (3 dk dv MACs); in-chunk QK^T, KK^T, A K (3 C dk);
      // in-chunk P Vn and A V (2 C dv).
      n.gdn_flops_per_token += 2 * Hv * (3 * dk * dv + 3 * chunk * dk + 2 * chunk * dv);
    } else if (c.mla) {  // q, the latent and its decompression, o, the per-head gate; keys and values cached per head
      const double R = c.kv_lora_rank, nope = c.qk_nope_dim, rope = c.qk_rope_dim, vdim = c.v_head_dim;
      nonexpert += D * H * hd + D * (R + rope) + R * H * (nope + vdim) + H * vdim * D + (c.mla_head_gate ? D * H : 0);
      n.kv_bytes_per_row += 2 * 2 * H * hd;
      n.attn_flops_per_qk_pair += 2 * 2 * H * hd;
    } else {
      nonexpert += D * (H * hd * (c.attn_output_gate ? 2 : 1) + 2 * Hkv * hd) + H * hd * D;
      n.kv_bytes_per_row += 2 * 2 * Hkv * hd;
      n.attn_flops_per_qk_pair += 2 * 2 * H * hd;
    }
    if (c.layer_is_moe[l]) {
      nonexpert += c.num_experts * D + 3 * D * c.shared_expert_intermediate_size +
                   (c.shared_expert_intermediate_size > 0 && c.shared_expert_gate ? D : 0);
      expert_active += c.experts_per_tok * 3 * D * c.moe_intermediate_size;
      n.expert_bytes_per_layer = 2 * 3 * D * c.moe_intermediate_size;
      ++n.moe_layers;
    } else {
      nonexpert += 3 * D * c.intermediate_size;
    }
  }
  n.proj_params_per_token = nonexpert + expert_active;
  n.lm_head_params = V * D;
  n.weight_bytes_per_decode_token = 2 * (nonexpert + expert_active + V * D + D);
  return n;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// The device's copy rate, TB/s: 1 GiB copied device to device (counted twice: read and written), the best of
// 20 copies after one untimed. Measured before the weights are loaded, so the 2 GiB fit beside them later.
double measure_copy_tbps() {
  const size_t bytes = size_t{1} << 30;
  void *src = nullptr, *dst = nullptr;
  HYPIC_CUDA_CHECK(cudaMalloc(&src, bytes));
  HYPIC_CUDA_CHECK(cudaMalloc(&dst, bytes));
  HYPIC_CUDA_CHECK(cudaMemset(src, 1, bytes));
  cudaStream_t s = nullptr;
  HYPIC_CUDA_CHECK(cudaStreamCreate(&s));
  double best = 0;
  for (int i = 0; i < 21; ++i) {
    cuda::Event e0, e1;
    e0.record(s);
    HYPIC_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, s));
    e1.record(s);
    e1.synchronize();
    if (i > 0) best = std::max(best, 2.0 * bytes / (1e-3 * e1.elapsed_ms(e0)) / 1e12);
  }
  HYPIC_CUDA_CHECK(cudaStreamDestroy(s));
  HYPIC_CUDA_CHECK(cudaFree(src));
  HYPIC_CUDA_CHECK(cudaFree(dst));
  return best;
}

std::vector<int> random_ids(int64_t n, int64_t V, uint64_t seed) {
  std::vector<int> ids(static_cast<size_t>(n));
  uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
  for (auto& id : ids) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    id = static_cast<int>(x % static_cast<uint64_t>(V));
  }
  return ids;
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse(argc, argv);
  try {
    if (!cuda::device_available()) {
      std::fprintf(stderr, "hypic_bench_model: no CUDA device\n");
      return 1;
    }
    cudaDeviceProp prop{};
    HYPIC_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    const double copy_tbps = measure_copy_tbps();

    std::unique_ptr<CudaBackend> backend;
    const auto t_load = std::chrono::steady_clock::now();
    if (a.random_weights) {
      std::string path = a.config;
      if (std::filesystem::is_directory(path)) path = (std::filesystem::path(path) / "config.json").string();
      backend = CudaBackend::random(ModelConfig::load(path), a.seed);
    } else {
      backend = CudaBackend::load(a.model);
    }
    const double load_s = seconds_since(t_load);
    CudaModel& model = backend->model();
    const ModelConfig& cfg = backend->config();
    const Counts cnt = count(cfg);
    // Full mode: no cache, every call a plain pass (one-token steps on the decode graph when it is on).
    Engine engine(*backend, CacheMode::Full, EngineOptions{});

    // Warm-up: cuBLAS heuristics, kernel attributes, the scratch pool at the measured sizes.
    const std::vector<int> ids = random_ids(a.prefill + a.decode, cfg.vocab_size, a.seed);
    {
      std::unique_ptr<State> w = backend->new_state();
      const std::vector<int> head(ids.begin(), ids.begin() + a.prefill);
      engine.forward(head, *w);
      for (int i = 0; i < 3 && i < a.decode; ++i) engine.forward(std::span<const int>(&ids[a.prefill + i], 1), *w);
    }

    std::unique_ptr<State> st = backend->new_state();
    const std::vector<int> prompt(ids.begin(), ids.begin() + a.prefill);
    // The call as a caller sees it, from the ids to the last row's logits on the host.
    std::vector<double> wall;
    std::vector<float> logits;
    for (int64_t i = 0; i < a.prefill_repeats; ++i) {
      std::unique_ptr<State> fresh = i == 0 ? nullptr : backend->new_state();
      State& s = i == 0 ? *st : *fresh;
      const auto t0 = std::chrono::steady_clock::now();
      std::vector<float> out = engine.forward(prompt, s);
      wall.push_back(seconds_since(t0));
      if (i == 0) logits = std::move(out);
    }
    const double prefill_s = wall.front();
    // Once more with the stream held busy for 300 ms first: the host issues the pass while the device waits,
    // then the device runs it back to back. Events after the wait and after the pass time the device alone;
    // the wall time above less this is the device's idle time between kernels waiting on the host.
    double device_s = 0;
    {
      std::unique_ptr<State> fresh = backend->new_state();
      cuda::Event e0, e1;
      cuda::spin(300000, model.stream());
      e0.record(model.stream());
      engine.forward(prompt, *fresh);
      e1.record(model.stream());
      e1.synchronize();
      device_s = 1e-3 * e1.elapsed_ms(e0);
    }

    const double T = static_cast<double>(a.prefill);
    const double proj_flops = 2 * cnt.proj_params_per_token * T + 2 * cnt.lm_head_params;
    const double attn_flops = cnt.attn_flops_per_qk_pair * T * (T + 1) / 2;
    const double gdn_flops = cnt.gdn_flops_per_token * T;
    const double prefill_flops = proj_flops + attn_flops + gdn_flops;

    // Decode: greedy continuation, one token per call, logits copied back each step (as a caller sees it).
    // Measured twice from the same prefilled state: replaying the captured CUDA graph (the default) and
    // launching every kernel. The first graph step also captures the graph (the KV cache grows past the
    // prompt): it is reported on its own and left out of the steady-state rate.
    std::unique_ptr<State> launched_st = backend->clone(*st);
    const std::vector<float> prefill_logits = logits;
    struct DecodeRun {
      double seconds = 0, bytes = 0, first_step_s = 0;
      int64_t steps = 0;
    };
    auto run_decode = [&](State& s, bool graphs) {
      model.set_decode_graphs(graphs);
      DecodeRun r;
      std::vector<float> lg = prefill_logits;
      for (int64_t i = 0; i < a.decode; ++i) {
        const int next = static_cast<int>(std::max_element(lg.begin(), lg.end()) - lg.begin());
        const int one[1] = {next};
        const double ctx = static_cast<double>(s.length + 1);
        const auto t = std::chrono::steady_clock::now();
        lg = engine.forward(one, s);
        const double dt = seconds_since(t);
        if (i == 0) {
          r.first_step_s = dt;
          if (a.decode > 1) continue;
        }
        r.seconds += dt;
        r.bytes += cnt.weight_bytes_per_decode_token + cnt.state_bytes + cnt.kv_bytes_per_row * ctx;
        ++r.steps;
      }
      return r;
    };
    const DecodeRun graph_run = a.decode > 0 ? run_decode(*st, true) : DecodeRun{};
    const DecodeRun launch_run = a.decode > 0 ? run_decode(*launched_st, false) : DecodeRun{};

    const double prefill_tps = T / prefill_s, prefill_tflops = prefill_flops / prefill_s / 1e12;
    std::printf("{\n");
    std::printf("  \"device\": \"%s\",\n", prop.name);
    std::printf("  \"model\": \"%s\",\n", a.random_weights ? ("random weights, " + a.config).c_str() : a.model.c_str());
    std::printf("  \"layers\": %lld, \"linear_layers\": %lld, \"hidden\": %lld, \"experts\": %lld, \"top_k\": %lld,\n",
                (long long)cfg.num_layers, (long long)cfg.num_linear_layers(), (long long)cfg.hidden_size,
                (long long)cfg.num_experts, (long long)cfg.experts_per_tok);
    std::printf("  \"weight_bytes\": %zu, \"load_seconds\": %.3f, \"copy_tb_per_s\": %.4f,\n", model.weight_bytes(),
                load_s, copy_tbps);
    std::printf("  \"prefill\": {\"tokens\": %lld, \"seconds\": %.6f, \"tokens_per_s\": %.1f,\n", (long long)a.prefill,
                prefill_s, prefill_tps);
    std::printf("    \"flops\": %.6e, \"projection_flops\": %.6e, \"attention_flops\": %.6e, \"gdn_flops\": %.6e,\n",
                prefill_flops, proj_flops, attn_flops, gdn_flops);
    std::printf("    \"tflops_per_s\": %.2f, \"peak_tflops\": %.1f, \"fraction_of_peak\": %.4f,\n", prefill_tflops,
                a.peak_tflops, prefill_tflops / a.peak_tflops);
    auto list = [](const std::vector<double>& v) {
      std::string o = "[";
      for (size_t i = 0; i < v.size(); ++i) o += (i ? ", " : "") + std::to_string(v[i]);
      return o + "]";
    };
    std::printf("    \"repeats_seconds\": %s, \"device_seconds\": %.6f,\n", list(wall).c_str(), device_s);
    const double best = *std::min_element(wall.begin(), wall.end());
    std::printf("    \"best_seconds\": %.6f, \"best_fraction_of_peak\": %.4f},\n", best,
                prefill_flops / best / 1e12 / a.peak_tflops);
    auto print_decode = [&](const char* name, const DecodeRun& r) {
      const double tps = static_cast<double>(r.steps) / r.seconds, tbps = r.bytes / r.seconds / 1e12;
      std::printf("  \"%s\": {\"steps\": %lld, \"batch\": 1, \"context_start\": %lld, \"first_step_ms\": %.3f, "
                  "\"seconds\": %.6f, \"tokens_per_s\": %.2f, \"ms_per_token\": %.3f,\n",
                  name, (long long)r.steps, (long long)a.prefill, 1e3 * r.first_step_s, r.seconds, tps,
                  1e3 * r.seconds / r.steps);
      std::printf("    \"bytes_per_token\": %.6e, \"weight_bytes_per_token\": %.6e, \"state_bytes\": %.6e,\n",
                  r.bytes / r.steps, cnt.weight_bytes_per_decode_token, cnt.state_bytes);
      std::printf("    \"tb_per_s\": %.4f, \"peak_tb_per_s\": %.2f, \"fraction_of_peak\": %.4f, "
                  "\"fraction_of_copy\": %.4f},\n",
                  tbps, a.peak_tbps, tbps / a.peak_tbps, tbps / copy_tbps);
    };
    if (a.decode > 0) {
      print_decode("decode", graph_run);
      print_decode("decode_launched", launch_run);
    }
    // Batched decode: N copies of the prefilled sequence step together (the serving path). Timed three
    // ways: the batched pass replayed from its graph (the default), the same pass launched, and the
    // engine's fallback of a lane per sequence (the batched pass turned off). Bytes: the weights the batch
    // touches (non-expert matrices once; the expected number of distinct experts per MoE layer when N
    // tokens each pick top_k of E uniformly), plus every sequence's states and KV cache.
    bool batch_oom = false;
    if (!a.batch.empty()) {
      std::printf("  \"batched_decode\": [\n");
      for (size_t bi = 0; bi < a.batch.size(); ++bi) {
        const int64_t N = a.batch[bi];
        const double E = static_cast<double>(cfg.num_experts), K = static_cast<double>(cfg.experts_per_tok);
        const double distinct = cnt.moe_layers > 0 ? E * (1 - std::pow(1 - K / E, static_cast<double>(N))) : 0;
        const double weights = cnt.weight_bytes_per_decode_token -
                               cnt.moe_layers * K * cnt.expert_bytes_per_layer +
                               cnt.moe_layers * distinct * cnt.expert_bytes_per_layer;
        std::printf("    {\"batch\": %lld, \"context\": %lld, \"weight_bytes_per_step\": %.6e", (long long)N,
                    (long long)a.prefill, weights);
        struct Way {
          const char* name;
          bool batched, graphs, drawn;
        };
        // "drawn": the serving path, each next token drawn on the device (greedy) instead of copying the
        // [N, V] logits to the host and taking the arg-max there.
        // A batch whose states do not fit beside the weights (batch 32 of an 8k context on an 80 GB card) ends the
        // list with an "error" entry, the JSON still whole, and the bench exits 1.
        try {
          for (const Way w : {Way{"graph_drawn", true, true, true}, Way{"graph", true, true, false},
                              Way{"launched", true, false, false}, Way{"lanes", false, false, false}}) {
            model.set_batch_decode(w.batched);
            model.set_decode_graphs(w.graphs);
            std::vector<std::unique_ptr<State>> seqs;
            for (int64_t i = 0; i < N; ++i) seqs.push_back(backend->clone(*st));
            std::vector<State*> ptrs;
            for (auto& p : seqs) ptrs.push_back(p.get());
            std::vector<int> tok(static_cast<size_t>(N));
            for (int64_t i = 0; i < N; ++i) tok[i] = ids[(a.prefill + i) % ids.size()];
            const int64_t captures0 = model.batch_graph_captures();
            for (int i = 0; i < 2; ++i) engine.decode_batch(ptrs, tok);  // capture, allocations
            model.decode_profile(true);  // the warm-up steps' share, if profiling
            double ctx = static_cast<double>(seqs[0]->length);
            double bytes = 0;
            const auto t = std::chrono::steady_clock::now();
            const Engine::TokenDraw greedy{SamplingParams{}, 0.5, cfg.vocab_size};
            const std::vector<const Engine::TokenDraw*> draws(static_cast<size_t>(N), &greedy);
            std::vector<int> sampled(static_cast<size_t>(N));
            std::vector<std::vector<float>> unused;
            for (int64_t i = 0; i < a.batch_steps; ++i) {
              if (w.drawn) {
                engine.decode_batch_drawn(ptrs, tok, draws, sampled, unused);
                tok = sampled;
              } else {
                const std::vector<float> lg = engine.decode_batch(ptrs, tok);
                for (int64_t j = 0; j < N; ++j)
                  tok[j] = static_cast<int>(std::max_element(lg.begin() + j * cfg.vocab_size,
                                                             lg.begin() + (j + 1) * cfg.vocab_size) -
                                            (lg.begin() + j * cfg.vocab_size));
              }
              bytes += weights + N * (cnt.state_bytes + cnt.kv_bytes_per_row * (ctx + 1));
              ctx += 1;
            }
            const double sec = seconds_since(t), rate = bytes / sec / 1e12;
            std::printf(",\n      \"%s\": {\"ms_per_step\": %.3f, \"tokens_per_s\": %.1f, \"tb_per_s\": %.4f, "
                        "\"fraction_of_peak\": %.4f, \"fraction_of_copy\": %.4f, \"graph_captures\": %lld}",
                        w.name, 1e3 * sec / a.batch_steps, N * a.batch_steps / sec, rate, rate / a.peak_tbps,
                        rate / copy_tbps, (long long)(model.batch_graph_captures() - captures0));
            const std::map<std::string, double> prof = model.decode_profile(true);
            if (!prof.empty()) {  // HYPIC_PROFILE_DECODE=1: device ms per step by part (launched steps)
              std::printf(",\n      \"%s_profile_ms_per_step\": {", w.name);
              const char* sep = "";
              for (const auto& [part, ms] : prof) {
                std::printf("%s\"%s\": %.3f", sep, part.c_str(), ms / a.batch_steps);
                sep = ", ";
              }
              std::printf("}");
            }
          }
        } catch (const cuda::CudaError& e) {
          if (e.code() != cudaErrorMemoryAllocation) throw;
          const std::string msg = nlohmann::json(std::string("out of device memory: ") + e.what()).dump();
          std::printf(",\n      \"error\": %s", msg.c_str());
          std::fprintf(stderr, "hypic_bench_model: batch %lld does not fit the device: %s\n", (long long)N, e.what());
          batch_oom = true;
        }
        model.set_batch_decode(true);
        model.set_decode_graphs(true);
        std::printf("}%s\n", bi + 1 < a.batch.size() && !batch_oom ? "," : "");
        if (batch_oom) break;
      }
      std::printf("  ],\n");
    }
    std::printf("  \"sequence_state_bytes\": %zu\n}\n", st->bytes());
    if (batch_oom) return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hypic_bench_model: %s\n", e.what());
    return 1;
  }
  return 0;
}
