// `hypic detokenize`: a JSON array of token ids -> the text, written exactly (no newline added).
#include <cstdio>
#include <memory>

#include "runtime/text/tokenizer.h"
#include "tools/hypic/cli_args.h"

namespace {

struct Options {
  std::string tokenizer, ids_file;
};

int run(const Options& o) {
  const std::vector<int> ids = hypic::cli::read_ids_json(o.ids_file);
  const hypic::Tokenizer tok = hypic::Tokenizer::from_file(o.tokenizer);
  std::string text;
  try {
    text = tok.decode(ids);
  } catch (const hypic::InvalidArgument& e) {
    throw hypic::InvalidArgument(o.ids_file + ": " + e.what());
  }
  std::fwrite(text.data(), 1, text.size(), stdout);
  return 0;
}

hypic::cli::Registrar reg("detokenize", "token ids (JSON array) -> text", [](CLI::App& app) {
  auto o = std::make_shared<Options>();
  app.add_option("--tokenizer", o->tokenizer, "the model's tokenizer.json")->required();
  app.add_option("--ids-file", o->ids_file, "a JSON array of token ids")->required();
  return [o] { return run(*o); };
});

}  // namespace
