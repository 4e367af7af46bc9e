// Byte-exactness of hypic's tokenizer against goldens from the Python `tokenizers` package
// (tools/fixtures/make_tokenizer_goldens.py) on the real Qwen3 tokenizer.
#include "runtime/text/tokenizer.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "runtime/error.h"
#include "tests/runtime/text/fixture_files.h"

namespace hypic {
namespace {

const std::string& kDir = test::kFixtures;
using test::slurp;

const Tokenizer& qwen() {
  static const Tokenizer t = Tokenizer::from_file(test::kQwen3Tokenizer + "/tokenizer.json");
  return t;
}

std::string ids_str(const std::vector<int>& v) { return nlohmann::json(v).dump(); }

TEST(Tokenizer, MatchesReferenceIdsOnGoldenCorpus) {
  HYPIC_NEED_QWEN3_TOKENIZER();
  const auto goldens = nlohmann::json::parse(slurp(kDir + "tokenizer/encode_goldens.json"));
  ASSERT_GE(goldens.size(), 400u);
  size_t checked = 0;
  for (const auto& g : goldens) {
    const std::string text = g["text"];
    const std::vector<int> want = g["ids"].get<std::vector<int>>();
    const std::vector<int> got = qwen().encode(text);
    EXPECT_EQ(got, want) << g["name"] << "\n got  " << ids_str(got) << "\n want " << ids_str(want);
    // decode(encode(x)) gives x back up to NFC (the normalizer), exactly what the reference decodes to.
    EXPECT_EQ(qwen().decode(got), g["decoded"].get<std::string>()) << g["name"];
    ++checked;
  }
  EXPECT_EQ(checked, goldens.size());
}

TEST(Tokenizer, RoundTripsNfcText) {
  HYPIC_NEED_QWEN3_TOKENIZER();
  for (const char* s : {"", "Hello world", "我们今天去公园", "e\xCC\x81", "caf\xC3\xA9", "👨‍👩‍👧‍👦 🇺🇸", "a\r\n\tb  c",
                        "<|im_start|>user\nhi<|im_end|>"}) {
    const std::string text = s;
    const auto ids = qwen().encode(text);
    const std::string back = qwen().decode(ids);
    if (text == "e\xCC\x81")
      EXPECT_EQ(back, "\xC3\xA9");  // NFC composes e + combining acute
    else
      EXPECT_EQ(back, text);
  }
}

TEST(Tokenizer, SpecialTokensAreSingleIds) {
  HYPIC_NEED_QWEN3_TOKENIZER();
  EXPECT_EQ(qwen().encode("<|im_start|>"), std::vector<int>{151644});
  EXPECT_EQ(qwen().encode("<|endoftext|>"), std::vector<int>{151643});
  EXPECT_EQ(qwen().encode("<tool_call>"), std::vector<int>{151657});
  EXPECT_EQ(qwen().token_to_id("<|im_end|>"), 151645);
  EXPECT_TRUE(qwen().is_special(151645));
  EXPECT_FALSE(qwen().is_special(151657));
  EXPECT_EQ(qwen().id_to_token(151644), "<|im_start|>");
  EXPECT_EQ(qwen().vocab_size(), 151669u);
  EXPECT_EQ(qwen().decode(std::vector<int>{151644, 9707, 151645}, /*skip_special_tokens=*/true), "Hello");
}

TEST(Tokenizer, LongInputsUseTheHeapMergeAndMatchShortPieces) {
  HYPIC_NEED_QWEN3_TOKENIZER();
  // Pieces longer than the short-word path (and the cache limit) take the heap merge; it must agree
  // with merging the same text piece by piece where the pre-tokenizer splits it identically.
  std::string letters;
  for (int i = 0; i < 2000; ++i) letters += static_cast<char>('a' + (i * 7) % 26);
  const auto ids = qwen().encode(letters);
  EXPECT_EQ(qwen().decode(ids), letters);
  std::string cjk;
  for (int i = 0; i < 500; ++i) cjk += "我们";
  EXPECT_EQ(qwen().decode(qwen().encode(cjk)), cjk);
  const std::string spaces(100000, ' ');
  EXPECT_EQ(qwen().decode(qwen().encode(spaces)), spaces);
}

TEST(Tokenizer, InvalidUtf8IsRejectedWithOffset) {
  HYPIC_NEED_QWEN3_TOKENIZER();
  try {
    qwen().encode("ab\xFF");
    FAIL() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("offset 2"), std::string::npos) << e.what();
  }
}

TEST(Tokenizer, DecodeRepairsPartialCharactersAndRejectsBadIds) {
  HYPIC_NEED_QWEN3_TOKENIZER();
  // 99 is the byte 0xA6 alone: not UTF-8, decoded as U+FFFD like the reference.
  EXPECT_EQ(qwen().decode(std::vector<int>{99}), "\xEF\xBF\xBD");
  EXPECT_THROW(qwen().decode(std::vector<int>{-1}), InvalidArgument);
  EXPECT_THROW(qwen().decode(std::vector<int>{151669}), InvalidArgument);
}

TEST(Tokenizer, LoadErrorsNameTheFile) {
  try {
    Tokenizer::from_file("/nonexistent/tokenizer.json");
    FAIL();
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/tokenizer.json"), std::string::npos);
  }
  try {
    Tokenizer::from_json("{\"model\": [1]", "broken.json");
    FAIL();
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("broken.json"), std::string::npos);
  }
  EXPECT_THROW(Tokenizer::from_json(R"({"model": {"type": "Unigram", "vocab": []}})", "u.json"), ModelError);
}

TEST(Tokenizer, TokenIdsOutsideTheAllowedRangeAreRefused) {
  auto error_of = [](const std::string& vocab, const std::string& added) -> std::string {
    try {
      Tokenizer::from_json(R"({"model": {"type": "BPE", "vocab": )" + vocab + R"(, "merges": []}, "added_tokens": )" +
                               added + "}",
                           "t.json");
    } catch (const FormatError& e) {
      return e.what();
    }
    return "accepted";
  };
  const std::string vocab = R"({"a": 0, "b": 1})";
  // 2^31 + 5 used to be truncated to a negative int; 2^32 + 5 to 5.
  EXPECT_EQ(error_of(vocab, R"([{"id": 2147483653, "content": "<x>"}])"),
            "t.json: added_tokens[0] has id 2147483653, outside [0, 16777216)");
  EXPECT_EQ(error_of(vocab, R"([{"id": 4294967301, "content": "<x>"}])"),
            "t.json: added_tokens[0] has id 4294967301, outside [0, 16777216)");
  EXPECT_EQ(error_of(vocab, R"([{"id": -1, "content": "<x>"}])"), "t.json: added_tokens[0] has id -1, outside [0, 16777216)");
  EXPECT_EQ(error_of(vocab, R"([{"id": 16777216, "content": "<x>"}])"),
            "t.json: added_tokens[0] has id 16777216, outside [0, 16777216)");
  EXPECT_EQ(error_of(R"({"a": 0, "b": 2147483647})", "[]"),
            "t.json: model.vocab[\"b\"] is not a valid id (an integer in [0, 16777216))");
  EXPECT_EQ(error_of(vocab, R"([{"id": 2, "content": "<x>"}])"), "accepted");
}

// A small hand-written byte-fallback BPE (the Llama/SentencePiece style) with "a b"-string merges.
// Expected values are what the Python `tokenizers` package gives for the same JSON.
TEST(Tokenizer, ByteFallbackAndStringMerges) {
  const char* json = R"({
    "added_tokens": [{"id": 9, "content": "<s>", "special": true, "normalized": false}],
    "normalizer": {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "\u2581"},
                                                        {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]},
    "pre_tokenizer": null,
    "model": {"type": "BPE", "byte_fallback": true, "fuse_unk": true, "unk_token": "<unk>",
              "vocab": {"<unk>": 0, "\u2581": 1, "a": 2, "b": 3, "\u2581a": 4, "ab": 5, "\u2581ab": 6,
                        "<0xC3>": 7, "<0xA9>": 8},
              "merges": ["\u2581 a", "a b", "\u2581a b"]},
    "decoder": {"type": "Sequence", "decoders": [{"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "},
                                                  {"type": "ByteFallback"}, {"type": "Fuse"},
                                                  {"type": "Strip", "content": " ", "start": 1, "stop": 0}]}
  })";
  const Tokenizer t = Tokenizer::from_json(json, "inline.json");
  EXPECT_EQ(t.encode("ab ab"), (std::vector<int>{6, 6}));
  EXPECT_EQ(t.encode("\xC3\xA9"), (std::vector<int>{1, 7, 8}));  // é is not in the vocab: its bytes
  EXPECT_EQ(t.encode("zz"), (std::vector<int>{1, 0}));            // unknowns fuse into one <unk>
  EXPECT_EQ(t.encode("<s>ab"), (std::vector<int>{9, 6}));
  EXPECT_EQ(t.decode(std::vector<int>{6, 6, 1, 7, 8}), "ab ab \xC3\xA9");
  EXPECT_EQ(t.decode(std::vector<int>{7, 2}), "\xEF\xBF\xBD" "a");  // a lone byte token is U+FFFD
  EXPECT_EQ(t.decode(std::vector<int>{1, 7}), "\xEF\xBF\xBD");
}

}  // namespace
}  // namespace hypic
