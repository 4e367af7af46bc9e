// Expanding a packed byte buffer into typed arrays, with element conversions: how an encoded cache record
// (runtime/entry_codec.h) becomes an entry's arrays; and the reverse, packing typed arrays into a byte
// buffer (how an entry becomes a record). Knows nothing of records: each piece names a byte offset into
// the packed buffer, an array, an element count and a conversion. The CUDA kernels
// (kernels/cuda/packed_expand.h) do the same on the device; these are their reference.
#pragma once
#include <cstddef>
#include <cstdint>

namespace hypic {

enum class ExpandOp : uint32_t {
  Copy16 = 0,     // n 2-byte elements copied as they are
  Copy32 = 1,     // n 4-byte elements copied as they are
  Bf16ToF32 = 2,  // n bf16 -> fp32 (exact)
  F32ToBf16 = 3,  // n fp32 -> bf16, rounded to nearest even, NaN kept a quiet NaN (kernels/dtype.h)
  Zero32 = 4,     // n fp32 zeros (the packed buffer is not read)
};

struct ExpandPiece {
  uint64_t src = 0;     // byte offset of the first element in the packed buffer (any alignment)
  uint64_t n = 0;       // elements
  void* dst = nullptr;  // the destination array, aligned to its element size
  ExpandOp op = ExpandOp::Copy32;
};

// Bytes a piece reads from the packed buffer.
inline uint64_t expand_src_bytes(const ExpandPiece& p) {
  switch (p.op) {
    case ExpandOp::Copy16:
    case ExpandOp::Bf16ToF32: return 2 * p.n;
    case ExpandOp::Copy32:
    case ExpandOp::F32ToBf16: return 4 * p.n;
    case ExpandOp::Zero32: return 0;
  }
  return 0;
}

// The reverse: n elements of the array `src` converted by `op` (Copy16, Copy32 or F32ToBf16) and written
// to the packed buffer from byte offset `dst` on (any alignment).
struct PackPiece {
  const void* src = nullptr;
  uint64_t n = 0;
  uint64_t dst = 0;
  ExpandOp op = ExpandOp::Copy32;
};

// Bytes a pack piece writes into the packed buffer.
inline uint64_t pack_dst_bytes(const PackPiece& p) {
  return p.op == ExpandOp::Copy32 ? 4 * p.n : 2 * p.n;
}

namespace cpu {
// Every piece of `pieces` [count] applied: dst[i] = op(packed element i of the piece), in host memory.
void expand_packed(const char* packed, const ExpandPiece* pieces, size_t count);
// Every pack piece applied: packed element i of the piece = op(src[i]), in host memory. Bytes no piece
// writes are left as they are.
void pack_arrays(char* packed, const PackPiece* pieces, size_t count);
}  // namespace cpu

}  // namespace hypic
