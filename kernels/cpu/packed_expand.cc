#include "kernels/packed_expand.h"

#include <algorithm>
#include <cstring>

#include "kernels/dtype.h"

namespace hypic::cpu {

void expand_packed(const char* packed, const ExpandPiece* pieces, size_t count) {
  for (size_t k = 0; k < count; ++k) {
    const ExpandPiece& p = pieces[k];
    const char* src = packed + p.src;
    switch (p.op) {
      case ExpandOp::Copy16:
      case ExpandOp::Copy32:
        if (p.n) std::memcpy(p.dst, src, expand_src_bytes(p));
        break;
      case ExpandOp::Bf16ToF32: {
        auto* d = static_cast<float*>(p.dst);
        for (uint64_t i = 0; i < p.n; ++i) {
          uint16_t h;
          std::memcpy(&h, src + 2 * i, 2);  // the packed buffer has any alignment
          d[i] = bf16_to_f32(h);
        }
        break;
      }
      case ExpandOp::F32ToBf16: {
        auto* d = static_cast<uint16_t*>(p.dst);
        for (uint64_t i = 0; i < p.n; ++i) {
          float f;
          std::memcpy(&f, src + 4 * i, 4);
          d[i] = f32_to_bf16(f);
        }
        break;
      }
      case ExpandOp::Zero32:
        std::fill_n(static_cast<float*>(p.dst), p.n, 0.0f);
        break;
    }
  }
}

void pack_arrays(char* packed, const PackPiece* pieces, size_t count) {
  for (size_t k = 0; k < count; ++k) {
    const PackPiece& p = pieces[k];
    char* dst = packed + p.dst;
    if (p.n == 0) continue;
    switch (p.op) {
      case ExpandOp::Copy16:
      case ExpandOp::Copy32:
        std::memcpy(dst, p.src, pack_dst_bytes(p));
        break;
      case ExpandOp::F32ToBf16: {
        const auto* s = static_cast<const float*>(p.src);
        for (uint64_t i = 0; i < p.n; ++i) {
          const uint16_t h = f32_to_bf16(s[i]);
          std::memcpy(dst + 2 * i, &h, 2);
        }
        break;
      }
      default:
        break;  // no other conversion packs (callers build Copy16, Copy32 and F32ToBf16 pieces only)
    }
  }
}

}  // namespace hypic::cpu
