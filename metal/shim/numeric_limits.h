// metal::numeric_limits (MSL spec §6.18 "Numeric limits") and the math constants
// of MSL §6.5.1 (M_PI_F, ..., and the half versions M_PI_H, ...), §6.5.2 (HALF_MAX,
// HALF_MIN, HALF_EPSILON, MAXHALF, ...). INFINITY, NAN, FLT_MAX, FLT_MIN,
// FLT_EPSILON, INT_MAX, ... come from the C headers (same values as MSL's).
#pragma once
#pragma GCC system_header
#include <cfloat>
#include <climits>
#include <cmath>
#include <limits>

#include "bfloat.h"
#include "half.h"

// numeric_limits for the 16-bit float types, so that metal::numeric_limits (the
// standard template) covers every MSL scalar.
namespace std {
template <>
class numeric_limits<metal::half> {
  using H = metal::half;
 public:
  static constexpr bool is_specialized = true, is_signed = true, is_integer = false,
                        is_exact = false, has_infinity = true, has_quiet_NaN = true,
                        is_iec559 = true, is_bounded = true;
  static constexpr int digits = 11, digits10 = 3, max_digits10 = 5, radix = 2,
                       min_exponent = -13, max_exponent = 16;
  static constexpr H min() { return metal::detail::half_from_bits(0x0400); }   // 2^-14
  static constexpr H max() { return metal::detail::half_from_bits(0x7bff); }   // 65504
  static constexpr H lowest() { return metal::detail::half_from_bits(0xfbff); }
  static constexpr H epsilon() { return metal::detail::half_from_bits(0x1400); }   // 2^-10
  static constexpr H denorm_min() { return metal::detail::half_from_bits(0x0001); }   // 2^-24
  static constexpr H infinity() { return metal::detail::half_from_bits(0x7c00); }
  static constexpr H quiet_NaN() { return metal::detail::half_from_bits(0x7e00); }
  static constexpr H round_error() { return metal::detail::half_from_bits(0x3800); }   // 0.5
};
template <>
class numeric_limits<metal::bfloat> {
  using B = metal::bfloat;
 public:
  static constexpr bool is_specialized = true, is_signed = true, is_integer = false,
                        is_exact = false, has_infinity = true, has_quiet_NaN = true,
                        is_iec559 = false, is_bounded = true;
  static constexpr int digits = 8, digits10 = 2, max_digits10 = 4, radix = 2,
                       min_exponent = -125, max_exponent = 128;
  static constexpr B min() { return B::from_bits(0x0080); }   // 2^-126
  static constexpr B max() { return B::from_bits(0x7f7f); }
  static constexpr B lowest() { return B::from_bits(0xff7f); }
  static constexpr B epsilon() { return B::from_bits(0x3c00); }   // 2^-7
  static constexpr B denorm_min() { return B::from_bits(0x0001); }
  static constexpr B infinity() { return B::from_bits(0x7f80); }
  static constexpr B quiet_NaN() { return B::from_bits(0x7fc0); }
  static constexpr B round_error() { return B::from_bits(0x3f00); }
};
}  // namespace std

namespace metal {
using std::numeric_limits;
}

#define MAXFLOAT FLT_MAX
#ifndef HUGE_VALF
#define HUGE_VALF INFINITY
#endif
#define HALF_MAX (::std::numeric_limits<::metal::half>::max())
#define HALF_MIN (::std::numeric_limits<::metal::half>::min())
#define HALF_EPSILON (::std::numeric_limits<::metal::half>::epsilon())
#define MAXHALF HALF_MAX
#define HUGE_VALH (::std::numeric_limits<::metal::half>::infinity())

#define M_E_F 2.71828182845904523536f
#define M_LOG2E_F 1.44269504088896340736f
#define M_LOG10E_F 0.434294481903251827651f
#define M_LN2_F 0.693147180559945309417f
#define M_LN10_F 2.30258509299404568402f
#define M_PI_F 3.14159265358979323846f
#define M_PI_2_F 1.57079632679489661923f
#define M_PI_4_F 0.785398163397448309616f
#define M_1_PI_F 0.318309886183790671538f
#define M_2_PI_F 0.636619772367581343076f
#define M_2_SQRTPI_F 1.12837916709551257390f
#define M_SQRT2_F 1.41421356237309504880f
#define M_SQRT1_2_F 0.707106781186547524401f
#define M_E_H ::metal::half(M_E_F)
#define M_LOG2E_H ::metal::half(M_LOG2E_F)
#define M_LOG10E_H ::metal::half(M_LOG10E_F)
#define M_LN2_H ::metal::half(M_LN2_F)
#define M_LN10_H ::metal::half(M_LN10_F)
#define M_PI_H ::metal::half(M_PI_F)
#define M_PI_2_H ::metal::half(M_PI_2_F)
#define M_PI_4_H ::metal::half(M_PI_4_F)
#define M_1_PI_H ::metal::half(M_1_PI_F)
#define M_2_PI_H ::metal::half(M_2_PI_F)
#define M_2_SQRTPI_H ::metal::half(M_2_SQRTPI_F)
#define M_SQRT2_H ::metal::half(M_SQRT2_F)
#define M_SQRT1_2_H ::metal::half(M_SQRT1_2_F)
