// Shared helpers of the libFuzzer targets: every target feeds bytes to one parser and accepts only
// hypic's typed errors; any other exception, crash, hang or sanitizer report is a finding.
#pragma once
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

namespace hypic::fuzz {

inline std::string_view as_text(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

// A per-process scratch folder for targets whose parser reads files.
inline const std::string& scratch_dir() {
  static const std::string dir = [] {
    std::string d = "/tmp/hypic_fuzz_" + std::to_string(getpid());
    std::string cmd = "mkdir -p " + d;
    if (std::system(cmd.c_str()) != 0) std::abort();
    return d;
  }();
  return dir;
}

inline void write_file(const std::string& path, std::string_view bytes) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) std::abort();
  if (!bytes.empty() && std::fwrite(bytes.data(), 1, bytes.size(), f) != bytes.size()) std::abort();
  std::fclose(f);
}

}  // namespace hypic::fuzz
