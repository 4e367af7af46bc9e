#include "tools/hypic/cli_args.h"

#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

namespace hypic::cli {

Args::Args(int argc, char** argv, std::set<std::string> switches) {
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a.rfind("--", 0) == 0 && a.size() > 2) {
      std::string name = a.substr(2);
      auto eq = name.find('=');
      if (eq != std::string::npos) {
        values_[name.substr(0, eq)] = name.substr(eq + 1);
      } else if (switches.count(name)) {
        values_[name] = "1";
      } else {
        if (i + 1 >= argc) throw UsageError("option --" + name + " needs a value");
        values_[name] = argv[++i];
      }
    } else {
      positionals_.push_back(a);
    }
  }
}

bool Args::has(const std::string& flag) const { return values_.count(flag) > 0; }

std::string Args::get(const std::string& flag, const std::string& fallback) const {
  auto it = values_.find(flag);
  return it == values_.end() ? fallback : it->second;
}

std::string Args::require(const std::string& flag) const {
  auto it = values_.find(flag);
  if (it == values_.end()) throw UsageError("missing required option --" + flag);
  return it->second;
}

long long Args::get_int(const std::string& flag, long long fallback) const {
  if (!has(flag)) return fallback;
  const std::string v = get(flag, "");
  try {
    size_t used = 0;
    long long x = std::stoll(v, &used);
    if (used != v.size()) throw std::invalid_argument(v);
    return x;
  } catch (const std::exception&) {
    throw UsageError("option --" + flag + " expects an integer, got '" + v + "'");
  }
}

double Args::get_double(const std::string& flag, double fallback) const {
  if (!has(flag)) return fallback;
  const std::string v = get(flag, "");
  try {
    size_t used = 0;
    double x = std::stod(v, &used);
    if (used != v.size()) throw std::invalid_argument(v);
    return x;
  } catch (const std::exception&) {
    throw UsageError("option --" + flag + " expects a number, got '" + v + "'");
  }
}

void Args::allow_only(const std::set<std::string>& known) const {
  for (const auto& [k, v] : values_)
    if (!known.count(k)) throw UsageError("unknown option --" + k);
}

std::vector<Command>& commands() {
  static std::vector<Command> all;
  return all;
}

Registrar::Registrar(std::string name, std::string summary, std::function<int(int, char**)> run) {
  commands().push_back({std::move(name), std::move(summary), std::move(run)});
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw IoError("cannot open file '" + path + "'");
  std::ostringstream ss;
  ss << in.rdbuf();
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
