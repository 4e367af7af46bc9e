// The Qwen3 vocab under other normalizers and pre-tokenizers (every Split behavior, invert, String
// patterns, Digits, GPT-2 ByteLevel regex, NFD/NFKC/NFKD, Prepend): ids must equal the Python
// `tokenizers` package's (goldens: tests/fixtures/tokenizer/variant_goldens.json).
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "runtime/text/tokenizer.h"
#include "tests/runtime/text/fixture_files.h"

namespace hypic {
namespace {

const std::string& kDir = test::kFixtures;
using test::slurp;

TEST(TokenizerVariants, MatchReferenceIds) {
  HYPIC_NEED_QWEN3_TOKENIZER();
  nlohmann::json base = nlohmann::json::parse(slurp(test::kQwen3Tokenizer + "/tokenizer.json"));
  const auto variants = nlohmann::json::parse(slurp(kDir + "tokenizer/variant_goldens.json"));
  ASSERT_GE(variants.size(), 10u);
  size_t cases = 0;
  for (const auto& v : variants) {
    base["normalizer"] = v["normalizer"];
    base["pre_tokenizer"] = v["pre_tokenizer"];
    const Tokenizer tok = Tokenizer::from_json(base.dump(), v["name"].get<std::string>());
    for (const auto& c : v["cases"]) {
      const std::string text = c["text"];
      EXPECT_EQ(tok.encode(text), c["ids"].get<std::vector<int>>()) << v["name"] << ": " << nlohmann::json(text).dump();
      ++cases;
    }
  }
  EXPECT_GE(cases, 700u);
}

}  // namespace
}  // namespace hypic
