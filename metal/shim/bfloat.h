// MSL `bfloat` (MSL spec §2.1.2, Metal 3.1): brain float16 — the upper 16 bits of
// an IEEE binary32 (1 sign, 8 exponent, 7 mantissa bits), software-emulated per
// soft_float.h.
#pragma once
#pragma GCC system_header
#include "soft_float.h"

namespace metal {
namespace detail {

struct bfloat16 {
  // f32 -> bfloat16, round to nearest, ties to even; overflow rounds to Inf the
  // same way; NaN stays a quiet NaN.
  static constexpr uint16_t from_float(float f) {
    const uint32_t x = float_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);
    return static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
  }
  static constexpr float to_float(uint16_t b) { return bits_float(static_cast<uint32_t>(b) << 16); }
};

}  // namespace detail

using bfloat = soft_float<detail::bfloat16>;
static_assert(sizeof(bfloat) == 2 && alignof(bfloat) == 2, "MSL bfloat is 2 bytes");

}  // namespace metal

using metal::bfloat;
