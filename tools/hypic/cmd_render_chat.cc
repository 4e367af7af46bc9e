// `hypic render-chat`: an OpenAI-style conversation -> the exact prompt text of the model's chat format.
#include <cstdio>
#include <memory>

#include <nlohmann/json.hpp>

#include "runtime/text/chat_format.h"
#include "tools/hypic/cli_args.h"

namespace {

struct Options {
  std::string model_dir, conversation, enable_thinking, chat_template;
  bool no_generation_prompt = false;
};

int run(const Options& o) {
  if (o.model_dir.empty() && o.chat_template.empty())
    throw hypic::cli::UsageError("render-chat needs --model-dir or --chat-template");
  const std::unique_ptr<hypic::ChatFormat> fmt = hypic::load_chat_format(o.model_dir, o.chat_template);
  nlohmann::ordered_json j;
  try {
    j = nlohmann::ordered_json::parse(hypic::cli::read_file(o.conversation));
  } catch (const nlohmann::json::exception& e) {  // parse_error, or out_of_range for a number too large
    throw hypic::FormatError(o.conversation + ": not valid JSON: " + e.what());
  }
  const hypic::Conversation conv = hypic::parse_openai_conversation(j, o.conversation);
  hypic::RenderOptions opts;
  opts.add_generation_prompt = !o.no_generation_prompt;
  if (!o.enable_thinking.empty()) opts.enable_thinking = o.enable_thinking == "true";
  hypic::RenderedChat r;
  try {
    r = fmt->render(conv, opts);
  } catch (const hypic::InvalidArgument& e) {
    throw hypic::InvalidArgument(o.conversation + ": " + e.what());
  }
  std::fwrite(r.text.data(), 1, r.text.size(), stdout);
  return 0;
}

hypic::cli::Registrar reg("render-chat", "conversation JSON -> the prompt text of a chat format (--model-dir or --chat-template)",
                          [](CLI::App& app) {
  auto o = std::make_shared<Options>();
  app.add_option("--model-dir", o->model_dir, "model directory (tokenizer_config.json: the chat format)");
  app.add_option("--chat-template", o->chat_template, "a Jinja chat template file (instead of --model-dir's)");
  app.add_option("--conversation", o->conversation, "OpenAI-style JSON: {\"messages\": [...], \"tools\": [...]}")
      ->required();
  app.add_flag("--no-generation-prompt", o->no_generation_prompt, "end after the last message (no assistant header)");
  app.add_option("--enable-thinking", o->enable_thinking, "the template's enable_thinking (unset: its default)")
      ->check(CLI::IsMember({"true", "false"}));
  return [o] { return run(*o); };
});

}  // namespace
