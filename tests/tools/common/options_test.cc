#include "tools/common/options.h"

#include <cstdint>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace hypic::tools {
namespace {

// Parses `args` (without the program name) into an app with one ranged int and one seed option.
struct Parsed {
  long long n = 8;
  uint64_t seed = 0;
  std::string error;  // empty when parsing succeeded
};

Parsed parse(std::vector<std::string> args) {
  Parsed p;
  CLI::App app("test", "prog");
  configure(app, /*uses_model=*/true);
  add_int(app, "--n", p.n, "a count", 1LL, 100LL);
  add_u64(app, "--seed", p.seed, "a seed");
  std::vector<const char*> argv{"prog"};
  for (auto& a : args) argv.push_back(a.c_str());
  try {
    app.parse(static_cast<int>(argv.size()), const_cast<char**>(argv.data()));
  } catch (const CLI::ParseError& e) {
    p.error = e.what();
  }
  return p;
}

TEST(Options, AcceptsWholeNumbersInRange) {
  const Parsed p = parse({"--n", "42", "--seed", "18446744073709551615"});
  EXPECT_EQ(p.error, "");
  EXPECT_EQ(p.n, 42);
  EXPECT_EQ(p.seed, UINT64_MAX);
}

TEST(Options, RefusesGarbageOverflowAndOutOfRangeNamingTheOption) {
  for (const char* bad : {"x", "4x", "", "2147483648", "99999999999999999999999", "0", "-3", "1.5"}) {
    const Parsed p = parse({"--n", bad});
    EXPECT_NE(p.error.find("--n"), std::string::npos) << bad << ": " << p.error;
  }
  // CLI11's own conversion would saturate a 2^64 seed to 2^64-1; the option refuses it.
  const Parsed p = parse({"--seed", "18446744073709551616"});
  EXPECT_NE(p.error.find("--seed"), std::string::npos) << p.error;
  EXPECT_NE(parse({"--seed", "-1"}).error, "");
}

TEST(Options, RefusesUnknownFlags) {
  EXPECT_NE(parse({"--nn", "3"}).error.find("--nn"), std::string::npos);
}

TEST(Options, HelpShowsDefaultsAndTheEnvironment) {
  CLI::App app("test", "prog");
  configure(app, /*uses_model=*/true);
  long long n = 8;
  add_int(app, "--n", n, "a count", 1LL, 100LL);
  const std::string help = app.help();
  EXPECT_NE(help.find("=8"), std::string::npos) << help;
  EXPECT_NE(help.find("HYPIC_THREADS"), std::string::npos) << help;
}

}  // namespace
}  // namespace hypic::tools
