// Float64 references for IEEE binary16 (half) and bfloat16, written from the
// formats' definitions: the exact value of every bit pattern and the nearest
// representable value with ties to even. Shared by the shim's gates.
#pragma once
#include <cmath>
#include <cstdint>

namespace float16_reference {

// Value of binary16 bits k (0 <= k < 0x7c00): subnormal m*2^-24, normal (1024+m)*2^(e-25).
inline double Binary16Value(uint32_t k) {
  const uint32_t e = k >> 10, m = k & 0x3ff;
  return e == 0 ? std::ldexp(double(m), -24) : std::ldexp(double(1024 + m), int(e) - 25);
}
// Value of bfloat16 bits k (0 <= k <= 0x7f80; 0x7f80 stands for 2^128, the value
// overflowing results round to): sign-free 8-bit exponent, 7-bit mantissa.
inline double Bfloat16Value(uint32_t k) {
  const uint32_t e = k >> 7, m = k & 0x7f;
  return e == 0 ? std::ldexp(double(m), -133) : std::ldexp(double(128 + m), int(e) - 134);
}
// Nearest representable to x among bits 0..top (ascending values), ties to even bits.
template <class ValueOf>
inline uint16_t NearestBits(double x, uint32_t top, ValueOf value_of) {
  const uint16_t sign = std::signbit(x) ? 0x8000 : 0;
  const double a = std::fabs(x);
  uint32_t lo = 0, hi = top;   // largest k with value_of(k) <= a
  if (a >= value_of(top)) return sign | top;
  while (hi - lo > 1) {
    const uint32_t mid = (lo + hi) / 2;
    (value_of(mid) <= a ? lo : hi) = mid;
  }
  const double below = a - value_of(lo), above = value_of(lo + 1) - a;
  const uint32_t k = below < above ? lo : above < below ? lo + 1 : (lo % 2 == 0 ? lo : lo + 1);
  return static_cast<uint16_t>(sign | k);
}
// binary16: everything >= 65520 (the tie between 65504 and 2^16) rounds to Inf.
inline uint16_t RefHalfBits(double x) {
  return NearestBits(x, 0x7c00, [](uint32_t k) { return k == 0x7c00 ? 65536.0 : Binary16Value(k); });
}
inline uint16_t RefBfloatBits(double x) { return NearestBits(x, 0x7f80, Bfloat16Value); }

inline double HalfValue(uint16_t bits) {
  const double v = (bits & 0x7fff) >= 0x7c00 ? INFINITY : Binary16Value(bits & 0x7fff);
  return (bits & 0x8000) ? -v : v;
}

}  // namespace float16_reference
