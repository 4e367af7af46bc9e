// `hypic detokenize`: a JSON array of token ids -> the text, written exactly (no newline added).
#include <cstdio>

#include "runtime/text/tokenizer.h"
#include "tools/hypic/cli_args.h"

namespace {

int run(int argc, char** argv) {
  hypic::cli::Args args(argc, argv);
  args.allow_only({"tokenizer", "ids-file"});
  const std::string path = args.require("ids-file");
  const std::vector<int> ids = hypic::cli::read_ids_json(path);
  const hypic::Tokenizer tok = hypic::Tokenizer::from_file(args.require("tokenizer"));
  std::string text;
  try {
    text = tok.decode(ids);
  } catch (const hypic::InvalidArgument& e) {
    throw hypic::InvalidArgument(path + ": " + e.what());
  }
  std::fwrite(text.data(), 1, text.size(), stdout);
  return 0;
}

hypic::cli::Registrar reg("detokenize", "token ids (JSON array) -> text: --tokenizer FILE --ids-file F", run);

}  // namespace
