#include "tools/hypic/cli_args.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

namespace hypic::cli {

std::vector<Command>& commands() {
  static std::vector<Command> all;
  return all;
}

Registrar::Registrar(std::string name, std::string summary, CommandSetup setup) {
  commands().push_back({std::move(name), std::move(summary), std::move(setup)});
}

void add_quiet(CLI::App& app, bool& quiet) {
  app.add_flag("--quiet", quiet, "no progress lines on stderr (drawn only when stderr is a terminal)");
}

CLI::Option* add_device(CLI::App& app, std::string& device, const std::string& help) {
  return app.add_option("--device", device, help)->check(CLI::IsMember({"cpu", "cuda", "auto"}));
}

std::string read_file(const std::string& path) {
  std::error_code ec;
  // An ifstream opens a directory and reads nothing: say what it is instead of returning "".
  if (std::filesystem::is_directory(path, ec)) throw IoError("'" + path + "' is a directory, not a file");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw IoError("cannot open file '" + path + "'");
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) throw IoError("cannot read file '" + path + "'");
  return ss.str();
}

std::vector<int> read_ids_json(const std::string& path) {
  const std::string text = read_file(path);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {  // parse_error, or out_of_range for a number too large
    throw FormatError(path + ": not valid JSON: " + e.what());
  }
  if (!j.is_array()) throw FormatError(path + ": expected a JSON array of token ids");
  std::vector<int> ids;
  for (size_t i = 0; i < j.size(); ++i) {
    if (!j[i].is_number_integer())
      throw FormatError(path + ": element " + std::to_string(i) + " is not an integer token id");
    long long v = j[i].get<long long>();
    if (v < 0 || v > 0x7fffffff)
      throw InvalidArgument(path + ": token id " + std::to_string(v) + " at index " + std::to_string(i) +
                            " is out of range");
    ids.push_back(static_cast<int>(v));
  }
  return ids;
}

}  // namespace hypic::cli
