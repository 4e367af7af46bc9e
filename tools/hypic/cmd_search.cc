// `hypic search`: BM25 search over ingested chunks, printed as JSON.
#include <cstdio>
#include <filesystem>
#include <memory>

#include "sdk/fts_retriever.h"
#include "tools/hypic/cli_args.h"

namespace {

struct Options {
  std::string db, query;
  long long k = 5;
};

int run(const Options& o) {
  using namespace hypic;
  // Searching must not create an empty database where the user mistyped the path.
  if (!std::filesystem::exists(o.db)) throw IoError("no database '" + o.db + "' (create it with hypic ingest)");
  const sdk::FtsRetriever store = sdk::FtsRetriever::open(o.db);
  const auto chunks = store.search(o.query, size_t(o.k));
  nlohmann::ordered_json out{{"query", o.query}, {"chunks", sdk::chunks_to_json(chunks)}};
  std::printf("%s\n", out.dump(2).c_str());
  return 0;
}

const hypic::cli::Registrar kSearch("search", "BM25 search over chunks ingested with hypic ingest", [](CLI::App& app) {
  auto o = std::make_shared<Options>();
  app.add_option("--db", o->db, "SQLite database written by hypic ingest")->required();
  app.add_option("--query", o->query, "search text")->required();
  hypic::tools::add_int(app, "--k", o->k, "number of chunks", 1LL, 10000LL);
  return [o] { return run(*o); };
});

}  // namespace
