// Where the text tests find their fixtures, and reading one whole.
#pragma once
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace hypic::test {

inline const std::string kFixtures = std::string(HYPIC_SOURCE_DIR) + "/tests/fixtures/";
// The real Qwen3 tokenizer (tokenizer.json, tokenizer_config.json): the shared fixture next to the
// checkout, or -DHYPIC_QWEN3_TOKENIZER_DIR.
inline const std::string kQwen3Tokenizer = HYPIC_QWEN3_TOKENIZER_DIR;

inline bool have_qwen3_tokenizer() { return std::filesystem::is_regular_file(kQwen3Tokenizer + "/tokenizer.json"); }

// First statement of a test that needs the Qwen3 tokenizer.
#define HYPIC_NEED_QWEN3_TOKENIZER()                                                                  \
  if (!::hypic::test::have_qwen3_tokenizer())                                                         \
  GTEST_SKIP() << "the Qwen3 tokenizer is not at " << ::hypic::test::kQwen3Tokenizer                   \
               << " (configure with -DHYPIC_QWEN3_TOKENIZER_DIR=...)"

inline std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace hypic::test
