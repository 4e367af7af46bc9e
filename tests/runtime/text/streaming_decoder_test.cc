// Streaming decode: chunks are whole UTF-8 characters and add up to the full decode.
#include "runtime/text/streaming_decoder.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "runtime/error.h"
#include "tests/runtime/text/fixture_files.h"

namespace hypic {
namespace {

const std::string& kDir = test::kFixtures;

const Tokenizer& qwen() {
  static const Tokenizer t = Tokenizer::from_file(test::kQwen3Tokenizer + "/tokenizer.json");
  return t;
}

bool valid_utf8(const std::string& s) {
  size_t i = 0;
  while (i < s.size()) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    const int n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    for (int k = 1; k < n; ++k)
      if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return false;
    i += n;
  }
  return true;
}

TEST(StreamingDecoder, ChunksAreWholeCharactersAndSumToDecode) {
  HYPIC_NEED_QWEN3_TOKENIZER();
  std::ifstream in(kDir + "tokenizer/encode_goldens.json");
  std::stringstream ss;
  ss << in.rdbuf();
  const auto goldens = nlohmann::json::parse(ss.str());
  size_t cases = 0;
  for (const auto& g : goldens) {
    const std::vector<int> ids = g["ids"].get<std::vector<int>>();
    StreamingDecoder dec(qwen());
    std::string streamed;
    for (int id : ids) {
      const std::string chunk = dec.push(id);
      EXPECT_TRUE(valid_utf8(chunk)) << g["name"];
      streamed += chunk;
    }
    streamed += dec.finish();
    EXPECT_EQ(streamed, qwen().decode(ids)) << g["name"];
    ++cases;
  }
  EXPECT_GE(cases, 400u);
}

TEST(StreamingDecoder, HoldsBackPartialCharacterUntilComplete) {
  HYPIC_NEED_QWEN3_TOKENIZER();
  // "😀" is 4 bytes; byte-level tokens split it. Encode then feed token by token.
  const std::vector<int> ids = qwen().encode("a😀");
  StreamingDecoder dec(qwen());
  std::string out;
  for (int id : ids) {
    const std::string c = dec.push(id);
    EXPECT_TRUE(c.empty() || c == "a" || c == "😀" || c == "a😀") << c;
    out += c;
  }
  EXPECT_EQ(out + dec.finish(), "a😀");
  // A truncated character is flushed as U+FFFD by finish().
  StreamingDecoder d2(qwen());
  EXPECT_EQ(d2.push(99), "");
  EXPECT_EQ(d2.finish(), "\xEF\xBF\xBD");
  EXPECT_THROW(d2.push(1 << 30), InvalidArgument);
}

// A decoder chain that treats the first token specially (Strip of the leading space) and turns
// <0xXX> tokens into bytes: streaming must still add up to the full decode.
TEST(StreamingDecoder, WorksWithByteFallbackAndStripDecoders) {
  const Tokenizer t = Tokenizer::from_json(R"({
    "model": {"type": "BPE", "byte_fallback": true,
              "vocab": {"<unk>": 0, "\u2581": 1, "a": 2, "b": 3, "\u2581a": 4, "ab": 5, "\u2581ab": 6, "<0xC3>": 7, "<0xA9>": 8},
              "merges": []},
    "decoder": {"type": "Sequence", "decoders": [{"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "},
                                                  {"type": "ByteFallback"}, {"type": "Fuse"},
                                                  {"type": "Strip", "content": " ", "start": 1, "stop": 0}]}})",
                                           "inline.json");
  const std::vector<int> ids{6, 6, 1, 7, 8, 4};
  StreamingDecoder dec(t);
  std::vector<std::string> chunks;
  for (int id : ids) chunks.push_back(dec.push(id));
  chunks.push_back(dec.finish());
  std::string all;
  for (const auto& c : chunks) all += c;
  EXPECT_EQ(all, t.decode(ids));
  EXPECT_EQ(all, "ab ab \xC3\xA9 a");
  EXPECT_EQ(chunks[3], "");  // the first byte of é alone is held back
}

}  // namespace
}  // namespace hypic
