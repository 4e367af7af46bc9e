// Very long runs (10 M spaces and friends) through the real Qwen3 tokenizer: the pre-tokenizer's
// regex must neither hit PCRE2's limits nor split differently from the reference. Goldens:
// tools/fixtures/make_long_run_goldens.py (the `tokenizers` package).
#include <gtest/gtest.h>

#include <cstdint>

#include <nlohmann/json.hpp>

#include "runtime/text/regex.h"
#include "runtime/text/tokenizer.h"
#include "tests/runtime/text/fixture_files.h"

namespace hypic {
namespace {

// Under ASan/UBSan the 10 M cases cost a minute of CI; the 1 M cases there cover the same paths.
#if defined(__SANITIZE_ADDRESS__)
constexpr size_t kMaxCaseBytes = 2'000'000;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr size_t kMaxCaseBytes = 2'000'000;
#else
constexpr size_t kMaxCaseBytes = SIZE_MAX;
#endif
#else
constexpr size_t kMaxCaseBytes = SIZE_MAX;
#endif

TEST(Regex, LongSpaceRunsTokenizeLikeTheReference) {
  HYPIC_NEED_QWEN3_TOKENIZER();
  const Tokenizer tok = Tokenizer::from_file(test::kQwen3Tokenizer + "/tokenizer.json");
  const auto cases = nlohmann::json::parse(test::slurp(test::kFixtures + "tokenizer/long_run_goldens.json"));
  ASSERT_EQ(cases.size(), 9u);
  for (const auto& c : cases) {
    std::string text;
    for (const auto& part : c["parts"])
      for (int64_t i = 0; i < part[1].get<int64_t>(); ++i) text += part[0].get<std::string>();
    if (text.size() > kMaxCaseBytes) continue;
    std::vector<int> want;
    for (const auto& run : c["ids_rle"]) want.insert(want.end(), run[1].get<size_t>(), run[0].get<int>());
    ASSERT_EQ(want.size(), c["count"].get<size_t>());
    const std::vector<int> got = tok.encode(text);
    ASSERT_EQ(got.size(), want.size()) << c["name"];
    EXPECT_TRUE(got == want) << c["name"];
  }
}

TEST(Regex, FindsMatchesPastAHugeBacktrackingRun) {
  // `\s+(?!\S)` backtracks one character per step at the end of a run; 10 M of them must still match.
  const Regex re(R"(\s+(?!\S)|\s+)", "test");
  const std::string text = std::string(10'000'000, ' ') + "x";
  size_t b = 0, e = 0;
  ASSERT_TRUE(re.find(text, 0, &b, &e));
  EXPECT_EQ(b, 0u);
  EXPECT_EQ(e, text.size() - 2);
}

}  // namespace
}  // namespace hypic
