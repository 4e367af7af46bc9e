// `hypic tokenize`: text file -> token ids as a JSON array (special tokens in the text are recognised).
#include <cstdio>
#include <memory>

#include <nlohmann/json.hpp>

#include "runtime/text/tokenizer.h"
#include "tools/hypic/cli_args.h"

namespace {

struct Options {
  std::string tokenizer, text_file;
};

int run(const Options& o) {
  const hypic::Tokenizer tok = hypic::Tokenizer::from_file(o.tokenizer);
  const std::string text = hypic::cli::read_file(o.text_file);
  std::vector<int> ids;
  try {
    ids = tok.encode(text);
  } catch (const hypic::InvalidArgument& e) {
    throw hypic::InvalidArgument(o.text_file + ": " + e.what());
  }
  std::printf("%s\n", nlohmann::json(ids).dump().c_str());
  return 0;
}

hypic::cli::Registrar reg("tokenize", "text file -> token ids (JSON array)", [](CLI::App& app) {
  auto o = std::make_shared<Options>();
  app.add_option("--tokenizer", o->tokenizer, "the model's tokenizer.json")->required();
  app.add_option("--text-file", o->text_file, "the text to encode")->required();
  return [o] { return run(*o); };
});

}  // namespace
