// MSL `half`: IEEE 754 binary16 (MSL spec §2.1; 1 sign, 5 exponent, 10 mantissa
// bits; subnormals supported): g++'s `_Float16`, else software-emulated
// (soft_float.h says which and why).
#pragma once
#pragma GCC system_header
#include "soft_float.h"

namespace metal {

#ifdef METAL_HALF_IS_FLOAT16
using half = _Float16;
#else
namespace detail {

struct binary16 {
  // f32 -> binary16, round to nearest, ties to even. NaN stays a quiet NaN.
  static constexpr uint16_t from_float(float f) {
    const uint32_t x = float_bits(f);
    const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
    const uint32_t ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u) return sign | 0x7e00u | ((ax >> 13) & 0x3ffu);   // NaN
    if (ax >= 0x477ff000u) return sign | 0x7c00u;   // >= 65520 rounds to Inf
    if (ax >= 0x38800000u) {                         // a normal binary16 (>= 2^-14)
      const uint32_t rounded = ax + 0xfffu + ((ax >> 13) & 1u);   // ties to even
      return sign | static_cast<uint16_t>((rounded - 0x38000000u) >> 13);  // rebias 127 -> 15
    }
    if (ax <= 0x33000000u) return sign;   // <= 2^-25: ties to even -> 0
    // Subnormal result: the value in units of 2^-24, rounded ties-to-even.
    const uint32_t exponent = ax >> 23;                       // 102..112
    const uint32_t mantissa = (ax & 0x7fffffu) | 0x800000u;   // with the implicit 1
    const uint32_t shift = 126u - exponent;                   // 14..24
    uint32_t q = mantissa >> shift;
    const uint32_t rest = mantissa & ((1u << shift) - 1u);
    const uint32_t halfway = 1u << (shift - 1u);
    if (rest > halfway || (rest == halfway && (q & 1u))) ++q;   // may carry to 2^-14
    return sign | static_cast<uint16_t>(q);
  }
  // binary16 -> f32, exact.
  static constexpr float to_float(uint16_t h) {
    const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
    const uint32_t exponent = (h >> 10) & 0x1fu;
    const uint32_t mantissa = h & 0x3ffu;
    if (exponent == 0) {   // zero or subnormal: mantissa * 2^-24
      const float magnitude = static_cast<float>(mantissa) * 5.9604644775390625e-8f;
      return sign ? -magnitude : magnitude;
    }
    if (exponent == 31) return bits_float(sign | 0x7f800000u | (mantissa << 13));
    return bits_float(sign | ((exponent + 112u) << 23) | (mantissa << 13));
  }
};

}  // namespace detail

using half = soft_float<detail::binary16>;
#endif
static_assert(sizeof(half) == 2 && alignof(half) == 2, "MSL half is 2 bytes");
static_assert(std::is_trivially_copyable_v<half>, "half must be usable in buffers");

namespace detail {
// The half whose binary16 encoding is `bits` (numeric_limits, tests).
constexpr half half_from_bits(uint16_t bits) { return __builtin_bit_cast(half, bits); }
}  // namespace detail

// MSL half literals: `1.0h` (the `h` suffix, MSL §2.1).
constexpr half operator""h(long double v) { return half(static_cast<float>(v)); }
constexpr half operator""h(unsigned long long v) { return half(static_cast<float>(v)); }

}  // namespace metal

using metal::half;
using metal::operator""h;
