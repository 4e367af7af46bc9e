// The hypic subcommands' shared pieces: the registry every cmd_*.cc adds itself to, where each command
// declares its options once on CLI11 (tools/common/options.h), and small input helpers.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "runtime/error.h"
#include "tools/common/options.h"

namespace hypic::cli {

// A usage mistake found after parsing (two options that exclude each other, a missing positional):
// exit status 2 like a parse error.
class UsageError : public InvalidArgument {
 public:
  using InvalidArgument::InvalidArgument;
};

// Declares a command's options on `app` and returns what runs once they are parsed (the options are
// bound to variables the returned function owns).
using CommandSetup = std::function<std::function<int()>(CLI::App& app)>;

struct Command {
  std::string name;
  std::string summary;
  CommandSetup setup;
};

// Each cmd_*.cc registers itself with a static Registrar.
std::vector<Command>& commands();
struct Registrar {
  Registrar(std::string name, std::string summary, CommandSetup setup);
};

// --quiet: no progress lines (they are drawn only when stderr is a terminal anyway).
void add_quiet(CLI::App& app, bool& quiet);

// Checks a --device value: cpu, cuda or auto.
CLI::Option* add_device(CLI::App& app, std::string& device, const std::string& help);

// The whole of a regular file; IoError naming the path for a missing file, a directory or a read error.
std::string read_file(const std::string& path);
std::vector<int> read_ids_json(const std::string& path);

}  // namespace hypic::cli
