#include <gtest/gtest.h>

#include "runtime/error.h"
#include "runtime/segment_key.h"

using namespace hypic;

TEST(Sha256, KnownVectors) {
  EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  // 112 bytes: the padding spills into a second block.
  EXPECT_EQ(sha256_hex("abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnopqrlmnopqrsmnopqrstnopqrstu"),
            "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1");
  EXPECT_EQ(sha256_hex(std::string(1000000, 'a')), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(SegmentKey, ContentKeyDependsOnEveryInput) {
  const KeyContext ctx{"model-a", "tok-a", 8};
  const std::vector<int> ids = {1, 2, 3};
  const SegmentKey k = content_key(ctx, ids);
  EXPECT_EQ(k, content_key(ctx, ids));
  EXPECT_EQ(k.hex().size(), 32u);
  EXPECT_NE(k, content_key({"model-b", "tok-a", 8}, ids));
  EXPECT_NE(k, content_key({"model-a", "tok-b", 8}, ids));
  EXPECT_NE(k, content_key({"model-a", "tok-a", 4}, ids));
  EXPECT_NE(k, content_key(ctx, std::vector<int>{1, 2, 4}));
  EXPECT_NE(k, content_key(ctx, std::vector<int>{1, 2}));
  // Field boundaries are encoded: moving a byte between fingerprints changes the key.
  EXPECT_NE(content_key({"ab", "c", 8}, ids), content_key({"a", "bc", 8}, ids));
}

TEST(SegmentKey, ChainKeyNamesThePrefix) {
  const KeyContext ctx{"m", "t", 8};
  const SegmentKey a = content_key(ctx, std::vector<int>{1}), b = content_key(ctx, std::vector<int>{2});
  const SegmentKey ab = chain_key(chain_key(std::nullopt, a), b);
  const SegmentKey ba = chain_key(chain_key(std::nullopt, b), a);
  EXPECT_NE(chain_key(std::nullopt, b), ab);
  EXPECT_NE(chain_key(chain_key(std::nullopt, b), a), chain_key(chain_key(std::nullopt, a), b));
  EXPECT_NE(ab, ba);
  EXPECT_NE(chain_key(std::nullopt, a), chain_key(SegmentKey{}, a));
}

TEST(SegmentKey, HexRoundTripAndErrors) {
  const SegmentKey k = content_key({"m", "t", 8}, std::vector<int>{7});
  EXPECT_EQ(segment_key_from_hex(k.hex()), k);
  EXPECT_THROW(segment_key_from_hex("abc"), InvalidArgument);
  EXPECT_THROW(segment_key_from_hex(std::string(32, 'g')), InvalidArgument);
}
