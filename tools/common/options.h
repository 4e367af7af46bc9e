// Conventions every hypic command-line program shares (the `hypic` CLI and the benchmarks), on CLI11:
// each option is declared once (name, type, default, help, check) and --help lists them all with their
// defaults; a malformed value, an out-of-range number or an unknown flag is an error naming the option.
#pragma once
#include <charconv>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include <CLI/CLI.hpp>

namespace hypic::tools {

// Environment variables the programs read, for --help footers (the README lists the same).
inline constexpr const char* kEnvironmentHelp =
    "Environment:\n"
    "  HYPIC_THREADS=N       CPU worker threads (default: every core)\n"
    "  HYPIC_CUDA_GRAPHS=0   CUDA builds: run decode steps without CUDA graphs (default: graphs on)\n"
    "  HYPIC_PROFILE=1       time every engine step of a request (synchronised) and print the totals\n"
    "  HYPIC_PROFILE=host    the host's time to issue every engine step instead (no synchronisation)";

// Shows every option's default in --help and sets the shared help footer.
inline void configure(CLI::App& app, bool uses_model) {
  app.option_defaults()->always_capture_default();
  app.get_formatter()->column_width(34);
  if (uses_model) app.footer(kEnvironmentHelp);
}

// Checks that a value is a whole number that fits T: CLI11's own conversion saturates on overflow
// (a 2^64 seed would silently become 2^64-1), this refuses it.
template <class T>
CLI::Validator whole_number() {
  return CLI::Validator(
      [](std::string& v) -> std::string {
        T x{};
        const char* end = v.data() + v.size();
        const auto [p, ec] = std::from_chars(v.data(), end, x);
        if (v.empty() || ec != std::errc() || p != end) return "'" + v + "' is not a whole number in range";
        return "";
      },
      "");
}

// An integer option checked against [lo, hi] at parse time (values outside, e.g. a 2^31 that would
// wrap an int, are errors naming the option).
template <class T>
CLI::Option* add_int(CLI::App& app, const std::string& name, T& value, const std::string& help, T lo, T hi) {
  return app.add_option(name, value, help)->check(whole_number<T>())->check(CLI::Range(lo, hi));
}

// An unsigned 64-bit option (seeds): any whole number that fits.
inline CLI::Option* add_u64(CLI::App& app, const std::string& name, uint64_t& value, const std::string& help) {
  return app.add_option(name, value, help)->check(whole_number<uint64_t>());
}

// Parses argv; on --help prints it and exits 0, on an error prints "PROGRAM: message" and exits 2.
inline void parse_or_exit(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    std::exit(app.exit(e));
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "%s: %s\nRun with --help for the options.\n", app.get_name().c_str(), e.what());
    std::exit(2);
  }
}

}  // namespace hypic::tools
