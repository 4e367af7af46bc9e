// A deterministic stand-in tokenizer for plan tests: <|name|> markers are single special ids, other
// text splits at whitespace into word ids. Enough to exercise tokens, keys and prefix token counts.
#pragma once
#include <string>
#include <vector>

#include "dsl/plan_tokenizer.h"

namespace hypic::dsl::test {

class FakeTokenizer : public PlanTokenizer {
 public:
  std::vector<int> encode(const std::string& text) const override {
    std::vector<int> ids;
    std::string word;
    auto flush = [&] {
      if (word.empty()) return;
      uint32_t h = 2166136261u;
      for (unsigned char c : word) h = (h ^ c) * 16777619u;
      ids.push_back(int(h % 50000));
      word.clear();
    };
    for (size_t i = 0; i < text.size(); ++i) {
      if (text.compare(i, 2, "<|") == 0) {
        const size_t end = text.find("|>", i + 2);
        if (end != std::string::npos) {
          flush();
          ids.push_back(100000 + int(end - i));
          i = end + 1;
          continue;
        }
      }
      if (text[i] == ' ' || text[i] == '\n') {
        flush();
        ids.push_back(text[i] == ' ' ? 1 : 2);
      } else {
        word.push_back(text[i]);
      }
    }
    flush();
    return ids;
  }
  std::string fingerprint() const override { return "fake-tokenizer-v1"; }
};

}  // namespace hypic::dsl::test
