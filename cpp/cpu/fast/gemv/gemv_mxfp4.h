// The fast GEMV's MXFP4 tables (both layouts): the E2M1 codes as the signed int8
// integers 2 * e2m1 (mxfp4_values.h), which each ISA's Lookup16 maps 32 codes through
// at once, and the halved E8M0 scale 2^(e - 128) that multiplies them.
#pragma once
#include <cstdint>
#include <cstring>

#include "mxfp4_values.h"

namespace metalrt::cpu::fast {

struct E2M1Int8Table {
  alignas(16) int8_t v[16];
};

constexpr E2M1Int8Table MakeE2M1Int8Table() {
  E2M1Int8Table t{};
  for (int code = 0; code < 16; ++code) {
    const int magnitude = kE2M1Doubled[code & 7];
    t.v[code] = static_cast<int8_t>(code & kE2M1SignBit ? -magnitude : magnitude);
  }
  return t;
}
inline constexpr E2M1Int8Table kE2M1Int8 = MakeE2M1Int8Table();

inline float E8M0Half(uint8_t e) {
  const uint32_t bits = e8m0_half_bits(e);
  float v;
  std::memcpy(&v, &bits, sizeof v);
  return v;
}

}  // namespace metalrt::cpu::fast
