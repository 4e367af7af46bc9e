// `hypic cache ls|stats|verify|clear --cache-dir D`: what a cache directory (the disk tier written by
// `run` / `chat` with --cache-dir) holds, a full check of every entry, and emptying it.
// `hypic cache size --config F.json`: bytes of one chunk's entry in each record format at a model's
// shape, computed from the shape alone (docs/cache_tiers.md).
#include <algorithm>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <memory>

#include "runtime/entry_codec.h"
#include "runtime/model_config.h"
#include "sdk/cache_dir.h"
#include "tools/hypic/cli_args.h"

namespace hypic::cli {
namespace {

struct Options {
  std::string action, dir, config;
  long long chunk_tokens = 512;
};

// K/V rows and conv tails as the CUDA backend keeps them (bf16); states and operators per format.
int size_table(const Options& o) {
  const ModelConfig c = ModelConfig::load(o.config);
  std::printf("entry of one %lld-token chunk at the shape of %s (%lld layers, %lld linear):\n", o.chunk_tokens,
              o.config.c_str(), static_cast<long long>(c.num_layers),
              static_cast<long long>(std::count(c.layer_kinds.begin(), c.layer_kinds.end(), LayerKind::LinearAttention)));
  std::printf("%-8s %12s %9s %9s\n", "format", "bytes", "MB", "MiB");
  for (const char* name : {"fp32", "bf16", "compact"}) {
    const size_t b = content_record_bytes(c, DType::BF16, o.chunk_tokens, parse_cache_format(name));
    std::printf("%-8s %12zu %9.1f %9.1f\n", name, b, b / 1e6, b / 1048576.0);
  }
  return 0;
}

std::string when(double t) {
  const std::time_t s = static_cast<std::time_t>(t);
  char buf[32];
  std::tm tm{};
  gmtime_r(&s, &tm);
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", &tm);
  return buf;
}

int run(const Options& o) {
  if (o.action == "size") {
    if (o.config.empty()) throw UsageError("cache size needs --config CONFIG.json");
    return size_table(o);
  }
  if (o.dir.empty()) throw UsageError("cache " + o.action + " needs --cache-dir D");
  // Opening creates a directory: a mistyped path is an error here, not an empty cache.
  if (!std::filesystem::exists(std::filesystem::path(o.dir) / "index.sqlite"))
    throw IoError("no cache directory '" + o.dir + "' (run or chat with --cache-dir creates one)");
  std::shared_ptr<sdk::CacheDir> c = sdk::CacheDir::open(o.dir);
  if (o.action == "ls") {
    std::printf("%-33s %-7s %12s %7s %6s  %s\n", "id", "kind", "bytes", "tokens", "hits", "last used (UTC)");
    for (const sdk::CacheDirEntry& e : c->list())
      std::printf("%-33s %-7s %12lld %7lld %6lld  %s\n", e.id.c_str(), e.id[0] == 'c' ? "content" : "chain",
                  static_cast<long long>(e.bytes), static_cast<long long>(e.tokens), static_cast<long long>(e.hits),
                  when(e.last_used).c_str());
    return 0;
  }
  if (o.action == "stats") {
    const sdk::CacheDirStats s = c->stats();
    std::printf("entries %lld (content %lld, chain %lld)\nbytes %lld (%.1f MiB)\ntokens %lld\nhits %lld\n",
                static_cast<long long>(s.entries), static_cast<long long>(s.content_entries),
                static_cast<long long>(s.chain_entries), static_cast<long long>(s.bytes), s.bytes / 1048576.0,
                static_cast<long long>(s.tokens), static_cast<long long>(s.hits));
    return 0;
  }
  if (o.action == "verify") {
    const sdk::CacheDirVerify v = c->verify();
    for (const std::string& p : v.problems) std::printf("dropped %s\n", p.c_str());
    std::printf("checked %lld entries: %lld intact, %lld dropped\n", static_cast<long long>(v.checked),
                static_cast<long long>(v.intact), static_cast<long long>(v.dropped));
    return v.dropped ? 1 : 0;  // scripts can tell a cache that needed repair
  }
  std::printf("removed %lld entries\n", static_cast<long long>(c->clear()));
  return 0;
}

Registrar reg("cache", "list, summarise, check or empty a cache directory (--cache-dir of run/chat)", [](CLI::App& app) {
  auto o = std::make_shared<Options>();
  app.add_option("ACTION", o->action,
                 "ls, stats, verify (exit 1 when an entry had to be dropped), clear; size (entry bytes per chunk "
                 "at --config's shape)")
      ->required()
      ->check(CLI::IsMember({"ls", "stats", "verify", "clear", "size"}));
  app.add_option("--cache-dir", o->dir, "the cache directory (ls, stats, verify, clear)");
  app.add_option("--config", o->config, "a model's config.json (size)");
  tools::add_int(app, "--chunk-tokens", o->chunk_tokens, "tokens per chunk (size)", 1LL, 1LL << 24);
  tools::configure(app, /*uses_model=*/false);
  return [o] { return run(*o); };
});

}  // namespace
}  // namespace hypic::cli
