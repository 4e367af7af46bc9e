// `hypic bench-tokenizer`: single-threaded encode throughput on a text file (compare with
// tools/fixtures/bench_tokenizer.py, which times the Python `tokenizers` package on the same file).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string_view>
#include <vector>

#include "runtime/text/tokenizer.h"
#include "tools/hypic/cli_args.h"

namespace {

// Documents of at least `chunk` bytes cut at line ends (0: the whole file as one document); the
// Python side cuts the same way, so both encode exactly the same strings.
std::vector<std::string_view> documents(std::string_view text, size_t chunk) {
  std::vector<std::string_view> docs;
  if (chunk == 0) {
    docs.push_back(text);
    return docs;
  }
  size_t begin = 0;
  while (begin < text.size()) {
    size_t end = begin + chunk;
    if (end >= text.size()) {
      end = text.size();
    } else {
      const size_t nl = text.find('\n', end);
      end = nl == std::string_view::npos ? text.size() : nl + 1;
    }
    docs.push_back(text.substr(begin, end - begin));
    begin = end;
  }
  return docs;
}

struct Options {
  std::string tokenizer, text_file;
  long long repeat = 3, chunk_bytes = 4096;
};

int run(const Options& o) {
  const long long repeat = o.repeat;
  const hypic::Tokenizer tok = hypic::Tokenizer::from_file(o.tokenizer);
  const std::string text = hypic::cli::read_file(o.text_file);
  const std::vector<std::string_view> docs = documents(text, static_cast<size_t>(o.chunk_bytes));
  double best = 1e300;
  size_t n_ids = 0;
  for (long long r = 0; r < repeat; ++r) {
    // Rounds after the first run with a warm word cache, as the Python side's do.
    const auto t0 = std::chrono::steady_clock::now();
    size_t n = 0;
    for (std::string_view d : docs) n += tok.encode(d).size();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::min(best, s);
    n_ids = n;
  }
  const double mb = static_cast<double>(text.size()) / 1e6;
  std::printf("hypic encode: %.2f MB in %zu documents, %zu tokens, best of %lld: %.3f s, %.2f MB/s\n", mb,
              docs.size(), n_ids, repeat, best, mb / best);
  return 0;
}

hypic::cli::Registrar reg("bench-tokenizer", "encode throughput (MB/s) of one thread on a text file", [](CLI::App& app) {
  auto o = std::make_shared<Options>();
  app.add_option("--tokenizer", o->tokenizer, "the model's tokenizer.json")->required();
  app.add_option("--text-file", o->text_file, "the text to encode")->required();
  hypic::tools::add_int(app, "--repeat", o->repeat, "rounds; the best is reported", 1LL, 1000000LL);
  hypic::tools::add_int(app, "--chunk-bytes", o->chunk_bytes,
                        "documents of at least this many bytes, cut at line ends (0: the whole file)", 0LL,
                        1LL << 40);
  return [o] { return run(*o); };
});

}  // namespace
