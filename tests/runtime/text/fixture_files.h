// Where the text tests find their fixtures, and reading one whole.
#pragma once
#include <fstream>
#include <sstream>
#include <string>

namespace hypic::test {

inline const std::string kFixtures = std::string(HYPIC_SOURCE_DIR) + "/tests/fixtures/";

inline std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace hypic::test
