// hypic: the command line. Subcommands live in cmd_*.cc and register themselves with their options;
// `hypic --help` lists the commands, `hypic COMMAND --help` a command's options with their defaults.
#include <cstdio>
#include <exception>
#include <map>
#include <string>
#include <vector>

#include "tools/hypic/cli_args.h"

int main(int argc, char** argv) {
  CLI::App app("hypic: agents and RAG on hybrid-attention LLMs with position-independent prompt caching",
               "hypic");
  hypic::tools::configure(app, /*uses_model=*/false);
  app.require_subcommand(1);
  std::map<const CLI::App*, std::function<int()>> runs;
  for (const auto& c : hypic::cli::commands()) {
    CLI::App* sub = app.add_subcommand(c.name, c.summary);
    hypic::tools::configure(*sub, /*uses_model=*/false);
    runs[sub] = c.setup(*sub);
  }
  if (argc < 2) {
    std::fprintf(stderr, "%s", app.help().c_str());
    return 2;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    // Name the subcommand the mistake belongs to (the deepest one parsed so far).
    std::string where = "hypic";
    for (const CLI::App* sub : app.get_subcommands()) where += " " + sub->get_name();
    std::string why = e.what();
    // CLI11 checks required options before unknown ones; a misspelt flag (--modle) explains a missing
    // --model, so unknown arguments are named first, flags as "unknown option".
    const std::vector<std::string> left = app.remaining(true);
    if ((dynamic_cast<const CLI::RequiredError*>(&e) || dynamic_cast<const CLI::ExtrasError*>(&e)) && !left.empty()) {
      std::string flags;
      for (const auto& a : left)
        if (a.size() > 1 && a[0] == '-') flags += (flags.empty() ? "" : " ") + a;
      why = flags.empty() ? "unexpected argument '" + left.front() + "'" : "unknown option " + flags;
    }
    std::fprintf(stderr, "%s: %s\nRun '%s --help' for the options.\n", where.c_str(), why.c_str(), where.c_str());
    return 2;
  }
  const CLI::App* sub = app.get_subcommands().front();
  const std::string name = sub->get_name();
  try {
    return runs.at(sub)();
  } catch (const hypic::cli::UsageError& e) {
    std::fprintf(stderr, "hypic %s: %s\nRun 'hypic %s --help' for the options.\n", name.c_str(), e.what(),
                 name.c_str());
    return 2;
  } catch (const hypic::Error& e) {
    std::fprintf(stderr, "hypic %s: error: %s\n", name.c_str(), e.what());
    return 1;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "hypic %s: error: out of memory\n", name.c_str());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hypic %s: error: %s\n", name.c_str(), e.what());
    return 1;
  }
}
