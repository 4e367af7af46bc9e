// `hypic ingest`: a folder of documents -> chunks in an SQLite FTS5 database, with a progress line.
#include <cstdio>
#include <memory>
#include <optional>

#include <nlohmann/json.hpp>

#include "runtime/text/tokenizer.h"
#include "runtime/text/tokenizer_fingerprint.h"
#include "sdk/document_ingester.h"
#include "tools/common/progress.h"
#include "tools/hypic/cli_args.h"

namespace {

class TokenizerCounter : public hypic::sdk::TokenCounter {
 public:
  explicit TokenizerCounter(const hypic::Tokenizer& t) : t_(t) {}
  size_t count(std::string_view text) const override { return t_.encode(text).size(); }
  std::string id() const override {
    return "tokenizer:" + hypic::tokenizer_fingerprint(t_);
  }

 private:
  const hypic::Tokenizer& t_;
};

struct Options {
  std::string db, dir, tokenizer;
  long long chunk_tokens = 256;
  bool quiet = false;
};

int run(const Options& o) {
  using namespace hypic;
  sdk::IngestOptions opt;
  opt.chunk_tokens = size_t(o.chunk_tokens);
  std::optional<Tokenizer> tok;
  std::optional<TokenizerCounter> counter;
  if (!o.tokenizer.empty()) {
    tok.emplace(Tokenizer::from_file(o.tokenizer));
    counter.emplace(*tok);
    opt.counter = &*counter;
  }
  sdk::FtsRetriever store = sdk::FtsRetriever::open(o.db);
  std::optional<tools::Progress> progress;  // made once the number of documents is known
  size_t total = 0;
  opt.on_document = [&](size_t i, size_t n, const std::string& path) {
    if (!progress) progress.emplace("ingesting documents", n, o.quiet);
    total = n;
    progress->update(i, path);
  };
  const sdk::IngestReport r = sdk::ingest_directory(store, o.dir, opt);
  if (progress) progress->update(total);
  progress.reset();
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
                                    [](CLI::App& app) {
  auto o = std::make_shared<Options>();
  app.add_option("--db", o->db, "SQLite database to create or update")->required();
  app.add_option("--dir", o->dir, "folder of .txt/.md/.markdown/.rst documents (searched recursively)")->required();
  hypic::tools::add_int(app, "--chunk-tokens", o->chunk_tokens, "chunk size in tokens (words without --tokenizer)",
                        1LL, 1000000LL);
  app.add_option("--tokenizer", o->tokenizer, "count tokens with this tokenizer.json (default: count words)");
  hypic::cli::add_quiet(app, o->quiet);
  return [o] { return run(*o); };
});

}  // namespace
