// hypic: the command line. Subcommands live in cmd_*.cc and register themselves.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>

#include "tools/hypic/cli_args.h"

namespace {

void usage() {
  std::fprintf(stderr, "usage: hypic <command> [options]\n\ncommands:\n");
  auto cmds = hypic::cli::commands();
  std::sort(cmds.begin(), cmds.end(), [](auto& a, auto& b) { return a.name < b.name; });
  for (const auto& c : cmds) std::fprintf(stderr, "  %-14s %s\n", c.name.c_str(), c.summary.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h")) {
    usage();
    return argc < 2 ? 2 : 0;
  }
  const std::string name = argv[1];
  for (const auto& c : hypic::cli::commands()) {
    if (c.name != name) continue;
    if (argc >= 3 && (!std::strcmp(argv[2], "--help") || !std::strcmp(argv[2], "-h"))) {
      std::printf("hypic %s: %s\n", c.name.c_str(), c.summary.c_str());
      return 0;
    }
    try {
      return c.run(argc - 1, argv + 1);
    } catch (const hypic::cli::UsageError& e) {
      std::fprintf(stderr, "hypic %s: %s\n", name.c_str(), e.what());
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
  std::fprintf(stderr, "hypic: unknown command '%s'\n", name.c_str());
  usage();
  return 2;
}
