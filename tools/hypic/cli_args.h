// Command-line parsing shared by the hypic subcommands: `--flag value`, `--switch`, positionals.
#pragma once
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "runtime/error.h"

namespace hypic::cli {

class UsageError : public Error {
 public:
  using Error::Error;
};

class Args {
 public:
  // `switches` are flags that take no value; every other --flag takes one.
  Args(int argc, char** argv, std::set<std::string> switches = {});

  bool has(const std::string& flag) const;
  std::string get(const std::string& flag, const std::string& fallback) const;
  std::string require(const std::string& flag) const;
  long long get_int(const std::string& flag, long long fallback) const;
  double get_double(const std::string& flag, double fallback) const;
  const std::vector<std::string>& positionals() const { return positionals_; }
  // Throws UsageError if a flag outside `known` was given (catches typos such as --modle).
  void allow_only(const std::set<std::string>& known) const;

 private:
  std::map<std::string, std::string> values_;
  std::vector<std::string> positionals_;
};

struct Command {
  std::string name;
  std::string summary;
  std::function<int(int argc, char** argv)> run;  // argv[0] is the subcommand name
};

// Each cmd_*.cc registers itself with a static Registrar.
std::vector<Command>& commands();
struct Registrar {
  Registrar(std::string name, std::string summary, std::function<int(int, char**)> run);
};

// Helpers used by several subcommands.
std::string read_file(const std::string& path);
std::vector<int> read_ids_json(const std::string& path);

}  // namespace hypic::cli
