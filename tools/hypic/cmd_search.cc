// hypic search --db FILE --query TEXT [--k N]: BM25 search over ingested chunks, printed as JSON.
#include <cstdio>
#include <filesystem>

#include "sdk/fts_retriever.h"
#include "tools/hypic/cli_args.h"

namespace {

int run_search(int argc, char** argv) {
  using namespace hypic;
  const cli::Args args(argc, argv);
  args.allow_only({"db", "query", "k"});
  if (!args.positionals().empty()) throw cli::UsageError("usage: hypic search --db FILE --query TEXT [--k N]");
  const long long k = args.get_int("k", 5);
  if (k < 1 || k > 10000) throw cli::UsageError("--k must be in [1, 10000]");
  const std::string db = args.require("db");
  // Searching must not create an empty database where the user mistyped the path.
  if (!std::filesystem::exists(db)) throw IoError("no database '" + db + "' (create it with hypic ingest)");
  const sdk::FtsRetriever store = sdk::FtsRetriever::open(db);
  const auto chunks = store.search(args.require("query"), size_t(k));
  nlohmann::ordered_json out{{"query", args.require("query")}, {"chunks", sdk::chunks_to_json(chunks)}};
  std::printf("%s\n", out.dump(2).c_str());
  return 0;
}

const hypic::cli::Registrar kSearch("search", "BM25 search over chunks ingested with hypic ingest", run_search);

}  // namespace
