// `hypic render-chat`: an OpenAI-style conversation -> the exact prompt text of the model's chat format.
#include <cstdio>

#include <nlohmann/json.hpp>

#include "runtime/text/chat_format.h"
#include "tools/hypic/cli_args.h"

namespace {

int run(int argc, char** argv) {
  hypic::cli::Args args(argc, argv, {"no-generation-prompt"});
  args.allow_only({"model-dir", "conversation", "no-generation-prompt", "enable-thinking"});
  const std::unique_ptr<hypic::ChatFormat> fmt = hypic::load_chat_format(args.require("model-dir"));
  const std::string path = args.require("conversation");
  nlohmann::ordered_json j;
  try {
    j = nlohmann::ordered_json::parse(hypic::cli::read_file(path));
  } catch (const nlohmann::json::exception& e) {  // parse_error, or out_of_range for a number too large
    throw hypic::FormatError(path + ": not valid JSON: " + e.what());
  }
  const hypic::Conversation conv = hypic::parse_openai_conversation(j, path);
  hypic::RenderOptions opts;
  opts.add_generation_prompt = !args.has("no-generation-prompt");
  if (args.has("enable-thinking")) {
    const std::string v = args.get("enable-thinking", "");
    if (v != "true" && v != "false") throw hypic::cli::UsageError("--enable-thinking expects true or false");
    opts.enable_thinking = v == "true";
  }
  hypic::RenderedChat r;
  try {
    r = fmt->render(conv, opts);
  } catch (const hypic::InvalidArgument& e) {
    throw hypic::InvalidArgument(path + ": " + e.what());
  }
  std::fwrite(r.text.data(), 1, r.text.size(), stdout);
  return 0;
}

hypic::cli::Registrar reg("render-chat",
                          "conversation JSON -> prompt text: --model-dir DIR --conversation F.json "
                          "[--no-generation-prompt] [--enable-thinking true|false]",
                          run);

}  // namespace
