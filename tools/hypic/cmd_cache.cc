// `hypic cache ls|stats|verify|clear --cache-dir D`: what a cache directory (the disk tier written by
// `run` / `chat` with --cache-dir) holds, a full check of every entry, and emptying it.
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <memory>

#include "sdk/cache_dir.h"
#include "tools/hypic/cli_args.h"

namespace hypic::cli {
namespace {

struct Options {
  std::string action, dir;
};

std::string when(double t) {
  const std::time_t s = static_cast<std::time_t>(t);
  char buf[32];
  std::tm tm{};
  gmtime_r(&s, &tm);
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", &tm);
  return buf;
}

int run(const Options& o) {
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
  app.add_option("ACTION", o->action, "ls, stats, verify (exit 1 when an entry had to be dropped) or clear")
      ->required()
      ->check(CLI::IsMember({"ls", "stats", "verify", "clear"}));
  app.add_option("--cache-dir", o->dir, "the cache directory")->required();
  tools::configure(app, /*uses_model=*/false);
  return [o] { return run(*o); };
});

}  // namespace
}  // namespace hypic::cli
