// Element types of weights and activations, and scalar conversions (round-to-nearest-even for bf16).
#pragma once
#include <cstdint>
#include <cstring>
#include <string>

namespace hypic {

enum class DType : uint8_t { F32, F16, BF16, F64, I64, I32, I16, I8, U8, BOOL };

size_t dtype_size(DType t);
const char* dtype_name(DType t);

inline float bf16_to_f32(uint16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline uint16_t f32_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);

// dst[i] = float(src[i]) for n elements of a float type (F32, F16, BF16, F64).
void convert_to_f32(const void* src, DType t, int64_t n, float* dst);

}  // namespace hypic
