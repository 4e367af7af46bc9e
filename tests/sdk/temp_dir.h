// A fresh directory per test, removed afterwards.
#pragma once
#include <filesystem>
#include <string>

#include <unistd.h>

namespace hypic::sdk::test {

struct TempDir {
  std::filesystem::path path;
  TempDir() {
    char tmpl[] = "/tmp/hypic_sdk_test_XXXXXX";
    path = mkdtemp(tmpl);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  std::string file(const std::string& name) const { return (path / name).string(); }
};

}  // namespace hypic::sdk::test
