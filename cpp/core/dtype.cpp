#include "metalrt/dtype.h"

#include <cstring>

#include "metalrt/errors.h"

namespace metalrt {

size_t DTypeSize(DType dtype) {
  switch (dtype) {
    case DType::kF32: case DType::kI32: case DType::kU32: return 4;
    case DType::kF16: case DType::kBF16: return 2;
    case DType::kI8: case DType::kU8: return 1;
    case DType::kI64: return 8;
  }
  throw TypeError("unknown dtype");
}

const char* DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kF32: return "float32";
    case DType::kF16: return "float16";
    case DType::kBF16: return "bfloat16";
    case DType::kI8: return "int8";
    case DType::kU8: return "uint8";
    case DType::kI32: return "int32";
    case DType::kI64: return "int64";
    case DType::kU32: return "uint32";
  }
  return "unknown";
}

DType DTypeFromName(const std::string& name) {
  for (DType d : {DType::kF32, DType::kF16, DType::kBF16, DType::kI8, DType::kU8,
                  DType::kI32, DType::kI64, DType::kU32}) {
    if (name == DTypeName(d)) return d;
  }
  throw TypeError("unknown dtype '" + name +
                  "'; expected one of float32, float16, bfloat16, int8, uint8, int32, "
                  "int64, uint32");
}

bool IsFloating(DType dtype) {
  return dtype == DType::kF32 || dtype == DType::kF16 || dtype == DType::kBF16;
}

static uint32_t BitsOf(float v) { uint32_t u; std::memcpy(&u, &v, 4); return u; }
static float FloatOf(uint32_t u) { float v; std::memcpy(&v, &u, 4); return v; }

uint16_t F32ToF16(float value) {
  const uint32_t x = BitsOf(value);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t abs = x & 0x7fffffffu;
  if (abs >= 0x7f800000u) {                       // Inf or NaN
    return static_cast<uint16_t>(sign | 0x7c00u | (abs > 0x7f800000u ? 0x0200u | ((abs >> 13) & 0x3ffu) : 0u));
  }
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to Inf
  if (abs < 0x38800000u) {                        // f16 subnormal or zero
    // value = abs_float; f16 subnormal unit is 2^-24. Round to nearest even.
    const int exp = static_cast<int>(abs >> 23);  // biased f32 exponent
    if (exp < 102) return static_cast<uint16_t>(sign);  // < 2^-25: rounds to 0
    const uint32_t mant = (abs & 0x7fffffu) | 0x800000u;
    const int shift = 126 - exp;                  // 14 + (113 - exp)
    uint32_t q = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1u);
    const uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1u))) ++q;
    return static_cast<uint16_t>(sign | q);
  }
  // Normal: rebias exponent, round mantissa from 23 to 10 bits.
  uint32_t r = abs - 0x38000000u;                 // exponent 127 -> 15
  const uint32_t rem = r & 0x1fffu;
  r >>= 13;
  if (rem > 0x1000u || (rem == 0x1000u && (r & 1u))) ++r;  // carries into exponent ok
  return static_cast<uint16_t>(sign | r);
}

float F16ToF32(uint16_t bits) {
  const uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
  const uint32_t exp = (bits >> 10) & 0x1fu;
  const uint32_t mant = bits & 0x3ffu;
  if (exp == 0x1f) return FloatOf(sign | 0x7f800000u | (mant << 13) | (mant ? 0x400000u : 0u));
  if (exp == 0) {
    if (mant == 0) return FloatOf(sign);
    const float v = static_cast<float>(mant) * (1.0f / 16777216.0f);  // mant * 2^-24
    return sign ? -v : v;
  }
  return FloatOf(sign | ((exp + 112u) << 23) | (mant << 13));
}

uint16_t F32ToBF16(float value) {
  const uint32_t x = BitsOf(value);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x0040u);  // quiet NaN
  const uint32_t rounding = 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>((x + rounding) >> 16);
}

float BF16ToF32(uint16_t bits) { return FloatOf(static_cast<uint32_t>(bits) << 16); }

float LoadAsF32(const void* data, DType dtype, int64_t index) {
  switch (dtype) {
    case DType::kF32: return static_cast<const float*>(data)[index];
    case DType::kF16: return F16ToF32(static_cast<const uint16_t*>(data)[index]);
    case DType::kBF16: return BF16ToF32(static_cast<const uint16_t*>(data)[index]);
    default: throw TypeError(std::string("expected a float dtype, got ") + DTypeName(dtype));
  }
}

void StoreFromF32(void* data, DType dtype, int64_t index, float value) {
  switch (dtype) {
    case DType::kF32: static_cast<float*>(data)[index] = value; return;
    case DType::kF16: static_cast<uint16_t*>(data)[index] = F32ToF16(value); return;
    case DType::kBF16: static_cast<uint16_t*>(data)[index] = F32ToBF16(value); return;
    default: throw TypeError(std::string("expected a float dtype, got ") + DTypeName(dtype));
  }
}

}  // namespace metalrt
