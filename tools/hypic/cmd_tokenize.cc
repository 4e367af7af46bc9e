// `hypic tokenize`: text file -> token ids as a JSON array (special tokens in the text are recognised).
#include <cstdio>

#include <nlohmann/json.hpp>

#include "runtime/text/tokenizer.h"
#include "tools/hypic/cli_args.h"

namespace {

int run(int argc, char** argv) {
  hypic::cli::Args args(argc, argv);
  args.allow_only({"tokenizer", "text-file"});
  const hypic::Tokenizer tok = hypic::Tokenizer::from_file(args.require("tokenizer"));
  const std::string path = args.require("text-file");
  const std::string text = hypic::cli::read_file(path);
  std::vector<int> ids;
  try {
    ids = tok.encode(text);
  } catch (const hypic::InvalidArgument& e) {
    throw hypic::InvalidArgument(path + ": " + e.what());
  }
  std::printf("%s\n", nlohmann::json(ids).dump().c_str());
  return 0;
}

hypic::cli::Registrar reg("tokenize", "text file -> token ids (JSON array): --tokenizer FILE --text-file F", run);

}  // namespace
