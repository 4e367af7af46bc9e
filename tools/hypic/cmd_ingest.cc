// hypic ingest --db FILE --dir DOCS [--chunk-tokens N] [--tokenizer tokenizer.json]: documents -> FTS5 chunks.
#include <cstdio>

#include <nlohmann/json.hpp>

#include "runtime/text/tokenizer.h"
#include "sdk/document_ingester.h"
#include "tools/hypic/cli_args.h"

namespace {

class TokenizerCounter : public hypic::sdk::TokenCounter {
 public:
  explicit TokenizerCounter(const hypic::Tokenizer& t) : t_(t) {}
  size_t count(std::string_view text) const override { return t_.encode(text).size(); }
  std::string id() const override {
    char buf[40];
    std::snprintf(buf, sizeof buf, "tokenizer:%016llx", static_cast<unsigned long long>(t_.fingerprint()));
    return buf;
  }

 private:
  const hypic::Tokenizer& t_;
};

int run_ingest(int argc, char** argv) {
  using namespace hypic;
  const cli::Args args(argc, argv);
  args.allow_only({"db", "dir", "chunk-tokens", "tokenizer"});
  if (!args.positionals().empty())
    throw cli::UsageError("usage: hypic ingest --db FILE --dir DOCS [--chunk-tokens N] [--tokenizer tokenizer.json]");
  sdk::IngestOptions opt;
  const long long n = args.get_int("chunk-tokens", 256);
  if (n < 1 || n > 1000000) throw cli::UsageError("--chunk-tokens must be in [1, 1000000]");
  opt.chunk_tokens = size_t(n);
  std::optional<Tokenizer> tok;
  std::optional<TokenizerCounter> counter;
  if (args.has("tokenizer")) {
    tok.emplace(Tokenizer::from_file(args.get("tokenizer", "")));
    counter.emplace(*tok);
    opt.counter = &*counter;
  }
  sdk::FtsRetriever store = sdk::FtsRetriever::open(args.require("db"));
  const sdk::IngestReport r = sdk::ingest_directory(store, args.require("dir"), opt);
  for (const auto& w : r.warnings) std::fprintf(stderr, "hypic ingest: warning: %s\n", w.c_str());
  nlohmann::ordered_json out{{"db", store.path()},
                             {"documents_added", r.documents_added},
                             {"documents_unchanged", r.documents_unchanged},
                             {"chunks_added", r.chunks_added},
                             {"chunks_total", store.chunk_count()},
                             {"token_count", counter ? "tokenizer" : "words"},
                             {"skipped", r.skipped}};
  std::printf("%s\n", out.dump(2).c_str());
  return 0;
}

const hypic::cli::Registrar kIngest("ingest", "split a folder of documents into chunks in an SQLite FTS5 database",
                                    run_ingest);

}  // namespace
