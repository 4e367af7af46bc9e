// `hypic serve` (options: the registration at the end; `hypic serve --help` lists them).
// An OpenAI-compatible HTTP server over one model (docs/serving.md): chat and text completions,
// streamed or not, with tool calls, position-independent caching of every request's blocks, batched
// decoding across requests, API keys with per-tenant cache isolation, metrics and a chat page at /.
#include <cstdio>
#include <filesystem>
#include <memory>

#include "runtime/backends.h"
#include "tools/common/weights_prefetch.h"
#include "tools/hypic/cli_args.h"
#include "tools/hypic/serve/http_server.h"

namespace hypic::cli {
namespace {

struct Options {
  std::string model, device = "auto", mode = "hypic", chat_template, host = "127.0.0.1", model_name, templates,
      generation_config = "auto";
  std::vector<std::string> api_keys;
  long long port = 8000, max_sessions = 16, max_queue = 64, cache_mb = 1024, max_body_kb = 4096, io_threads = 4,
            prefill_chunk = 2048;
  uint64_t seed = 0;
  bool quiet = false, random_weights = false;
};

// The model's generation_config.json sampling defaults (--generation-config auto), or OpenAI's.
serve::SamplingDefaults read_sampling_defaults(const Options& o) {
  const std::string path = (std::filesystem::path(o.model) / "generation_config.json").string();
  if (o.generation_config == "none" || !std::filesystem::exists(path)) return {};
  const serve::Json gc = serve::Json::parse(read_file(path), nullptr, /*allow_exceptions=*/false);
  if (gc.is_discarded()) throw Error(path + ": not valid JSON");
  return serve::sampling_defaults(gc, path);
}

int run(const Options& o) {
  // Templates and sampling defaults first: a broken file is reported before the model is loaded.
  serve::TemplateCatalog templates;
  if (!o.templates.empty()) templates = serve::TemplateCatalog::load(o.templates);
  const serve::SamplingDefaults sampling = read_sampling_defaults(o);
  sdk::RuntimeOptions ro;
  ro.model_dir = o.model;
  ro.device = o.device;
  ro.mode = parse_mode(o.mode);
  ro.cache_bytes = static_cast<size_t>(o.cache_mb) << 20;
  ro.chat_template_file = o.chat_template;
  ro.random_weights = o.random_weights;
  ro.seed = o.seed;
  // Warm-up passes (CUDA) up to the largest pass the scheduler runs, a prefill chunk: scratch for more rows
  // would stay cached in the device's pool unused.
  ro.warm_up_rows = resolve_device(o.device) == Device::Cuda ? o.prefill_chunk : 0;
  if (!o.random_weights) tools::prefetch_weights(o.model, o.quiet);
  std::unique_ptr<sdk::Runtime> rt = sdk::Runtime::open(ro);

  serve::ServerOptions so;
  so.host = o.host;
  so.port = static_cast<int>(o.port);
  so.api_keys = o.api_keys;
  for (auto& k : so.api_keys)
    if (k.empty()) throw UsageError("--api-key must not be empty");
  so.max_body_bytes = static_cast<size_t>(o.max_body_kb) << 10;
  so.io_threads = static_cast<int>(o.io_threads);
  so.templates = std::move(templates);
  so.sampling = sampling;
  so.model_name = !o.model_name.empty() ? o.model_name
                                        : std::filesystem::path(o.model).lexically_normal().filename().string();
  if (so.model_name.empty()) so.model_name = std::filesystem::path(o.model).lexically_normal().parent_path().filename().string();

  serve::Metrics metrics;
  serve::SchedulerOptions sched;
  sched.max_running = static_cast<size_t>(o.max_sessions);
  sched.max_queued = static_cast<size_t>(o.max_queue);
  sched.prefill_chunk = o.prefill_chunk;
  serve::Scheduler scheduler(*rt, metrics, std::move(sched));
  metrics.add_gauge("hypic_queue_depth", "Requests waiting for the engine.", [&] { return double(scheduler.queued()); });
  metrics.add_gauge("hypic_running_sessions", "Generations being decoded.", [&] { return double(scheduler.running()); });
  metrics.add_gauge("hypic_resident_memory_bytes", "Resident memory of the process.", [] { return serve::resident_bytes(); });
  Engine& engine = rt->engine();
  metrics.add_gauge("hypic_cache_bytes", "Bytes held by the segment store.",
                    [&engine] { return double(engine.store().stats().bytes); });
  metrics.add_gauge("hypic_cache_entries", "Entries in the segment store.",
                    [&engine] { return double(engine.store().stats().entries); });

  serve::HttpServer server(so, *rt, scheduler, metrics);
  const int port = server.listen();
  const std::string with_templates =
      o.templates.empty() ? "" : ", " + std::to_string(so.templates.size()) + " templates from " + o.templates;
  std::fprintf(stderr, "hypic serve: %s on %s (%s mode, %s chat format%s), listening on http://%s:%d%s\n",
               so.model_name.c_str(), device_name(rt->device()), mode_name(ro.mode), rt->chat_format().name().c_str(),
               with_templates.c_str(), so.host.c_str(), port, so.api_keys.empty() ? "" : " (API keys required)");
  if (!sampling.from_file.empty()) {
    std::string fields;
    char buf[64];
    for (const std::string& f : sampling.from_file) {
      if (f == "temperature") std::snprintf(buf, sizeof buf, "temperature %g", sampling.temperature);
      else if (f == "top_p") std::snprintf(buf, sizeof buf, "top_p %g", sampling.top_p);
      else if (f == "top_k") std::snprintf(buf, sizeof buf, "top_k %d", sampling.top_k);
      else if (f == "repetition_penalty") std::snprintf(buf, sizeof buf, "repetition_penalty %g", sampling.repetition_penalty);
      else std::snprintf(buf, sizeof buf, "max_tokens %d", sampling.max_tokens);
      fields += (fields.empty() ? "" : ", ") + std::string(buf);
    }
    std::fprintf(stderr, "hypic serve: requests default to the model's generation_config.json: %s\n", fields.c_str());
  }
  std::fflush(stderr);
  server.run(/*handle_signals=*/true);
  scheduler.stop();
  std::fprintf(stderr, "hypic serve: stopped\n");
  return 0;
}

Registrar reg("serve", "OpenAI-compatible HTTP server (chat, completions, tools, streaming)", [](CLI::App& app) {
  auto o = std::make_shared<Options>();
  app.add_option("--model", o->model, "model directory (config.json, *.safetensors, tokenizer files)")->required();
  add_device(app, o->device, "cpu, cuda or auto (CUDA where built and a GPU is present, else the CPU)");
  app.add_option("--host", o->host, "address to listen on");
  tools::add_int(app, "--port", o->port, "TCP port (0: any free port; the one bound is printed)", 0LL, 65535LL);
  app.add_option("--api-key", o->api_keys,
                 "accepted API key (repeat for several; none: no authentication); each key is its own cache tenant");
  tools::add_int(app, "--max-sessions", o->max_sessions, "generations decoded together (the decode batch)", 1LL, 4096LL);
  tools::add_int(app, "--max-queue", o->max_queue, "requests that may wait beyond those; more get 429", 0LL, 1000000LL);
  tools::add_int(app, "--prefill-chunk", o->prefill_chunk,
                 "prompt tokens run between two decode steps: an arriving prompt is admitted in chunks of this "
                 "size, so running generations stall for one chunk at a time",
                 1LL, 1LL << 30);
  tools::add_int(app, "--max-body-kb", o->max_body_kb, "largest request body, in KiB; larger gets 413", 1LL, 1LL << 20);
  tools::add_int(app, "--io-threads", o->io_threads, "threads serving connections", 1LL, 256LL);
  app.add_option("--mode", o->mode, "cache mode")->check(CLI::IsMember({"full", "prefix", "hypic", "naive", "noseam"}));
  tools::add_int(app, "--cache-mb", o->cache_mb, "segment store budget, in MiB", 1LL, 1LL << 24);
  app.add_option("--chat-template", o->chat_template, "a Jinja chat template file to use instead of the model's own");
  app.add_option("--model-name", o->model_name, "model id clients name (default: the model directory's name)");
  app.add_option("--templates", o->templates,
                 "folder of YAML prompt templates that requests may name ({\"hypic\": {\"template\", \"vars\"}}); "
                 "each is loaded and checked at start-up")
      ->check(CLI::ExistingDirectory);
  app.add_option("--generation-config", o->generation_config,
                 "auto: a request's omitted temperature, top_p, top_k, repetition_penalty and max_tokens take the "
                 "values of the model's generation_config.json, when it has one (as vLLM does); none: OpenAI's "
                 "defaults")
      ->check(CLI::IsMember({"auto", "none"}));
  app.add_flag("--random-weights", o->random_weights,
               "random weights of --model's config.json shape, on the GPU (benchmarks without a checkpoint)");
  tools::add_u64(app, "--seed", o->seed, "seed of --random-weights");
  add_quiet(app, o->quiet);
  tools::configure(app, /*uses_model=*/true);
  return [o] { return run(*o); };
});

}  // namespace
}  // namespace hypic::cli
