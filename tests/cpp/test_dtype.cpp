#include <doctest/doctest.h>

#include <cmath>
#include <limits>

#include "metalrt/dtype.h"

using namespace metalrt;

TEST_CASE("dtype sizes") {
  CHECK(DTypeSize(DType::kF32) == 4);
  CHECK(DTypeSize(DType::kBF16) == 2);
  CHECK(DTypeSize(DType::kI64) == 8);
  CHECK(DTypeSize(DType::kU8) == 1);
}

TEST_CASE("f16 conversion: rounding, specials, subnormals") {
  CHECK(F32ToF16(1.0f) == 0x3c00);
  CHECK(F32ToF16(65504.0f) == 0x7bff);
  CHECK(F32ToF16(65520.0f) == 0x7c00);                 // ties to even -> Inf
  CHECK(F32ToF16(std::ldexp(1.0f, -24)) == 0x0001);    // smallest subnormal
  CHECK(F32ToF16(std::ldexp(1.0f, -25)) == 0x0000);    // tie to even -> 0
  CHECK(F32ToF16(std::ldexp(3.0f, -26)) == 0x0001);    // above the tie -> 1
  CHECK(F16ToF32(0x0001) == std::ldexp(1.0f, -24));
  CHECK(std::isnan(F16ToF32(F32ToF16(std::numeric_limits<float>::quiet_NaN()))));
  CHECK(F16ToF32(F32ToF16(-INFINITY)) == -INFINITY);
  CHECK(F32ToF16(1.0f + std::ldexp(1.0f, -11)) == 0x3c00);                       // tie, even
  CHECK(F32ToF16(1.0f + std::ldexp(3.0f, -11)) == 0x3c02);                       // tie, up to even
}

TEST_CASE("bf16 conversion") {
  CHECK(F32ToBF16(1.0f) == 0x3f80);
  CHECK(F32ToBF16(1.0f + std::ldexp(1.0f, -8)) == 0x3f80);   // tie to even
  CHECK(F32ToBF16(1.0f + std::ldexp(3.0f, -8)) == 0x3f82);
  CHECK(std::isnan(BF16ToF32(F32ToBF16(std::numeric_limits<float>::quiet_NaN()))));
  CHECK(BF16ToF32(F32ToBF16(INFINITY)) == INFINITY);
}
