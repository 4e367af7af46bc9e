// Where the time of a lower-tier hit goes (docs/cache_tiers.md): for one content entry of --chunk-tokens
// tokens at CONFIG's cache shape (the entry arrays only: the weights are not needed, so on the CPU the
// backend has none), per record format: encoding (the reference encoder: the entry copied out and
// converted on the host; and encode_record: laid out on the host, packed by the backend), the checksum,
// the reference decode (the record parsed
// on the host into the entry's layout, then copied to the backend: what a promotion cost before), and the
// promotion path (header checked on the host, the packed record copied and expanded by the backend:
// asynchronous on CUDA, timed to the end of a sync). One JSON object on stdout.
// Usage: hypic_bench_entry_codec --config CONFIG.json [--device cpu|cuda] [--chunk-tokens 512] [--reps 5]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "runtime/backends.h"
#include "runtime/cpu_backend.h"
#include "runtime/entry_codec.h"
#include "runtime/error.h"
#include "runtime/host_record.h"
#include "tools/common/options.h"

using namespace hypic;

namespace {

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// Median of `reps` timings of f (milliseconds).
template <class F>
double median_ms(int reps, F&& f) {
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    t.push_back(ms_since(t0));
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// Fills the entry's block with values of the magnitudes real entries hold (states and operators near 1,
// some heads of the operators zero), in the backend's element types.
void fill(Backend& b, const SegmentEntry& e, uint64_t seed) {
  const ModelConfig& c = b.config();
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.0f, 0.5f);
  std::vector<char> img(e.mem->bytes());
  auto put_f32 = [&](void* dev, size_t n) {
    auto* p = reinterpret_cast<float*>(img.data() + (static_cast<char*>(dev) - static_cast<char*>(e.mem->data())));
    for (size_t i = 0; i < n; ++i) p[i] = nd(rng);
  };
  auto put_kv = [&](void* dev, size_t n) {
    char* p = img.data() + (static_cast<char*>(dev) - static_cast<char*>(e.mem->data()));
    for (size_t i = 0; i < n; ++i) {
      const float v = nd(rng);
      if (b.kv_dtype() == DType::F32) reinterpret_cast<float*>(p)[i] = v;
      else reinterpret_cast<uint16_t*>(p)[i] = f32_to_bf16(v);
    }
  };
  const size_t op = size_t(c.lin_v_heads) * c.lin_k_dim * c.lin_k_dim, st = size_t(c.lin_v_heads) * c.lin_k_dim * c.lin_v_dim;
  const size_t tail = size_t(c.conv_kernel - 1) * c.lin_conv_dim(), rows = e.tokens.size() * size_t(c.num_kv_heads * c.head_dim);
  for (int l = 0; l < c.num_layers; ++l) {
    if (c.layer_kinds[l] == LayerKind::LinearAttention) {
      put_f32(e.linear[l].transfer, op);
      put_f32(e.linear[l].body, st);
      put_f32(e.linear[l].full, st);
      put_kv(e.linear[l].conv_tail, tail);
    } else {
      put_kv(e.attention[l].k, rows);
      put_kv(e.attention[l].v, rows);
    }
  }
  b.copy_from_host(img.data(), e.mem->data(), img.size());
}

}  // namespace

int main(int argc, char** argv) {
  std::string config, device = "cpu";
  int64_t chunk = 512;
  int reps = 5;
  CLI::App app("Time the encoding, checksum and decoding of one cache entry record at a model's cache shape",
               "hypic_bench_entry_codec");
  app.add_option("--config", config, "CONFIG.json (or its folder): the cache shape")->required();
  app.add_option("--device", device, "device")->check(CLI::IsMember({"cuda", "cpu"}));
  tools::add_int<int64_t>(app, "--chunk-tokens", chunk, "tokens of the entry", 1, 1 << 20);
  tools::add_int(app, "--reps", reps, "timed repetitions (the median is reported)", 1, 1000);
  tools::parse_or_exit(app, argc, argv);
  try {
    std::string path = config;
    if (std::filesystem::is_directory(path)) path = (std::filesystem::path(path) / "config.json").string();
    const ModelConfig cfg = ModelConfig::load(path);
    // The CPU needs no weights to hold entries; CUDA takes random weights of the shape.
    std::unique_ptr<Backend> b = resolve_device(device) == Device::Cpu
                                     ? std::make_unique<CpuBackend>(cfg, ModelWeights{})
                                     : random_backend(cfg, 1, Device::Cuda);
    KeyContext ctx;
    ctx.model_fingerprint = cfg.fingerprint;
    ctx.tokenizer_fingerprint = "bench";
    ctx.seam_width = 8;
    std::vector<int> tokens(static_cast<size_t>(chunk));
    for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int>((i * 7919) % cfg.vocab_size);
    auto e = std::make_shared<SegmentEntry>(SegmentEntry::allocate(*b, tokens, std::min<int64_t>(8, chunk)));
    fill(*b, *e, 1);
    b->sync();
    std::printf("{\n  \"config\": \"%s\", \"device\": \"%s\", \"chunk_tokens\": %lld, \"entry_bytes\": %zu, \"formats\": [",
                config.c_str(), device_name(b->device()), static_cast<long long>(chunk), e->bytes());
    const char* sep = "";
    for (const char* name : {"fp32", "bf16", "compact"}) {
      const EntryCodecOptions o = parse_cache_format(name);
      std::string rec;
      const double enc = median_ms(reps, [&] { rec = encode_entry(*b, ctx, *e, o); });
      const double packed = median_ms(reps, [&] { encode_record(*b, ctx, *e, o); });
      volatile uint64_t sink = 0;
      const std::string_view body(rec.data(), rec.size() - 8);
      const double sum = median_ms(reps, [&] { sink = sink + entry_checksum(body); });
      const double dec = median_ms(reps, [&] {
        auto d = decode_segment_entry(*b, ctx, rec, name);
        b->sync();
      });
      auto host = std::make_shared<HostRecord>(*b, rec.size());
      std::copy(rec.begin(), rec.end(), host->data());
      const double promote_checked = median_ms(reps, [&] {
        auto d = promote_segment_entry(*b, ctx, host, name, /*verified=*/false);
        b->sync();
      });
      const double promote = median_ms(reps, [&] {
        auto d = promote_segment_entry(*b, ctx, host, name, /*verified=*/true);
        b->sync();
      });
      const double gbps = static_cast<double>(body.size()) / (sum * 1e6);
      std::printf("%s\n    {\"format\": \"%s\", \"record_bytes\": %zu, \"encode_ms\": %.2f, \"encode_packed_ms\": %.2f, \"checksum_ms\": %.2f, "
                  "\"checksum_gb_per_s\": %.1f, \"reference_decode_ms\": %.2f, \"promote_ms\": %.2f, "
                  "\"promote_with_checksum_ms\": %.2f}",
                  sep, name, rec.size(), enc, packed, sum, gbps, dec, promote, promote_checked);
      sep = ",";
      std::fflush(stdout);
    }
    std::printf("\n  ]\n}\n");
  } catch (const std::exception& err) {
    std::fprintf(stderr, "hypic_bench_entry_codec: %s\n", err.what());
    return 1;
  }
  return 0;
}
