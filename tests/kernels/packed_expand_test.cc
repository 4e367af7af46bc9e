// The CPU reference of the packed expansion and packing (kernels/packed_expand.h): every conversion on
// elements that start at odd byte offsets of the packed buffer, rounding of fp32 -> bf16 (ties to even,
// NaN kept a NaN), zero pieces that read nothing, pieces that leave the elements around them alone, and
// packing as the reverse of expanding.
#include "kernels/packed_expand.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels/dtype.h"

namespace hypic {
namespace {

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

TEST(PackedExpand, ConvertsElementsAtAnyByteOffset) {
  // Packed: 1 stray byte, 3 bf16, 2 fp32, 2 fp32 (to bf16), 2 bf16 (copied).
  const std::vector<uint16_t> h = {f32_to_bf16(1.5f), f32_to_bf16(-2.25f), f32_to_bf16(3e-20f)};
  // 1 + 2^-8 lies halfway between two bf16 values (ties to even: down to 1); 1 + 3 * 2^-8 ties up to 1 + 2^-6.
  const std::vector<float> f = {1.0f + std::ldexp(1.0f, -8), 1.0f + 3 * std::ldexp(1.0f, -8)};
  const std::vector<float> g = {0.1f, -7.0f};
  const std::vector<uint16_t> c = {0x1234, 0xBEEF};
  std::vector<char> packed(1);
  packed[0] = 0x5a;
  auto append = [&](const void* p, size_t n) {
    packed.insert(packed.end(), static_cast<const char*>(p), static_cast<const char*>(p) + n);
  };
  append(h.data(), 6);
  append(g.data(), 8);
  append(f.data(), 8);
  append(c.data(), 4);

  std::vector<float> out_h(3 + 2, -1.0f), out_g(2 + 1, -1.0f), zeros(4, -1.0f);
  std::vector<uint16_t> out_f(2 + 1, 0xFFFF), out_c(2, 0);
  const ExpandPiece pieces[] = {
      {1, 3, out_h.data() + 1, ExpandOp::Bf16ToF32},
      {7, 2, out_g.data(), ExpandOp::Copy32},
      {15, 2, out_f.data(), ExpandOp::F32ToBf16},
      {23, 2, out_c.data(), ExpandOp::Copy16},
      {0, 3, zeros.data(), ExpandOp::Zero32},
  };
  cpu::expand_packed(packed.data(), pieces, 5);

  EXPECT_EQ(out_h, (std::vector<float>{-1.0f, 1.5f, -2.25f, bf16_to_f32(f32_to_bf16(3e-20f)), -1.0f}));
  EXPECT_EQ(bits(out_g[0]), bits(0.1f));
  EXPECT_EQ(bits(out_g[1]), bits(-7.0f));
  EXPECT_EQ(out_g[2], -1.0f);  // past the piece: untouched
  EXPECT_EQ(out_f[0], 0x3F80);  // 1.0 (the tie rounded down, to the even mantissa)
  EXPECT_EQ(out_f[1], 0x3F82);  // 1 + 2^-6 (the tie rounded up, to the even mantissa)
  EXPECT_EQ(out_f[2], 0xFFFF);
  EXPECT_EQ(out_c, (std::vector<uint16_t>{0x1234, 0xBEEF}));
  EXPECT_EQ(zeros, (std::vector<float>{0.0f, 0.0f, 0.0f, -1.0f}));
}

TEST(PackedExpand, Fp32ToBf16KeepsNanAndInfinity) {
  const std::vector<float> f = {std::numeric_limits<float>::infinity(), from_bits(0x7F800001u),
                                -std::numeric_limits<float>::infinity(), from_bits(0x3F7FFFFFu)};
  std::vector<uint16_t> out(4);
  const ExpandPiece p{0, 4, out.data(), ExpandOp::F32ToBf16};
  cpu::expand_packed(reinterpret_cast<const char*>(f.data()), &p, 1);
  EXPECT_EQ(out[0], 0x7F80);
  EXPECT_TRUE(std::isnan(bf16_to_f32(out[1])));  // a signalling NaN stays a NaN (quiet), not infinity
  EXPECT_EQ(out[2], 0xFF80);
  EXPECT_EQ(out[3], 0x3F80);  // just below 1 rounds up to 1
}

TEST(PackedExpand, PackingIsTheReverseAtAnyByteOffset) {
  const std::vector<float> f = {1.5f, -0.1f, 3.0f};
  const std::vector<uint16_t> h = {0xABCD, 0x0102};
  std::vector<char> packed(1 + 12 + 6 + 4 + 1, 0x77);
  const PackPiece pieces[] = {
      {f.data(), 3, 1, ExpandOp::Copy32},
      {f.data(), 3, 13, ExpandOp::F32ToBf16},
      {h.data(), 2, 19, ExpandOp::Copy16},
  };
  cpu::pack_arrays(packed.data(), pieces, 3);
  EXPECT_EQ(packed.front(), 0x77);  // bytes no piece writes stay
  EXPECT_EQ(packed.back(), 0x77);
  // Expanding what was packed gives the arrays back (bf16 rounded).
  std::vector<float> f32(3), f16(3);
  std::vector<uint16_t> h16(2);
  const ExpandPiece back[] = {
      {1, 3, f32.data(), ExpandOp::Copy32},
      {13, 3, f16.data(), ExpandOp::Bf16ToF32},
      {19, 2, h16.data(), ExpandOp::Copy16},
  };
  cpu::expand_packed(packed.data(), back, 3);
  EXPECT_EQ(f32, f);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(f16[i], bf16_to_f32(f32_to_bf16(f[i])));
  EXPECT_EQ(h16, h);
  EXPECT_EQ(pack_dst_bytes(pieces[0]), 12u);
  EXPECT_EQ(pack_dst_bytes(pieces[1]), 6u);
  EXPECT_EQ(pack_dst_bytes(pieces[2]), 4u);
}

TEST(PackedExpand, SourceBytesPerPiece) {
  EXPECT_EQ(expand_src_bytes({0, 5, nullptr, ExpandOp::Copy16}), 10u);
  EXPECT_EQ(expand_src_bytes({0, 5, nullptr, ExpandOp::Bf16ToF32}), 10u);
  EXPECT_EQ(expand_src_bytes({0, 5, nullptr, ExpandOp::Copy32}), 20u);
  EXPECT_EQ(expand_src_bytes({0, 5, nullptr, ExpandOp::F32ToBf16}), 20u);
  EXPECT_EQ(expand_src_bytes({0, 5, nullptr, ExpandOp::Zero32}), 0u);
}

}  // namespace
}  // namespace hypic
