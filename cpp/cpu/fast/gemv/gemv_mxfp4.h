// The fast GEMV's MXFP4 tables (both layouts): the E2M1 codes as the signed int8
// integers 2 * e2m1 (mxfp4_values.h), which each ISA's Lookup16 maps 32 codes through
// at once, the same shifted by kE2M1Offset into unsigned bytes (the AVX-512 m = 1
// kernel's u8 side of vpdpbusd, the offset taken out of the dot as Q4_0's 8 is), and
// the halved E8M0 scale 2^(e - 128) that multiplies them.
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

// The largest doubled magnitude: 2 * e2m1 + kE2M1Offset is in 0 .. 24.
inline constexpr int kE2M1Offset = kE2M1Doubled[7];

constexpr E2M1Int8Table MakeE2M1OffsetTable() {
  E2M1Int8Table t{};
  for (int code = 0; code < 16; ++code) t.v[code] = static_cast<int8_t>(kE2M1Int8.v[code] + kE2M1Offset);
  return t;
}
inline constexpr E2M1Int8Table kE2M1Offset8 = MakeE2M1OffsetTable();

inline float E8M0Half(uint8_t e) {
  const uint32_t bits = e8m0_half_bits(e);
  float v;
  std::memcpy(&v, &bits, sizeof v);
  return v;
}

}  // namespace metalrt::cpu::fast
