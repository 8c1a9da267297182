// Gates of silu_and_mul (SwiGLU) against float64.
#include <doctest/doctest.h>

#include <cmath>

#include "metalrt/ops.h"
#include "op_testing.h"

using namespace metalrt;
using namespace metalrt::testing;

TEST_CASE("silu_and_mul: against float64, every float dtype, odd widths") {
  const Shape shapes[] = {{1, 2}, {3, 62}, {2, 64}, {5, 66}, {2, 3072}, {2, 3, 18}, {10}};
  uint32_t seed = 400;
  for (DType dtype : kFloatDTypes) {
    for (const Shape& shape : shapes) {
      CAPTURE(std::string(DTypeName(dtype)));
      CAPTURE(ShapeToString(shape));
      const int64_t n = shape.back() / 2;
      const std::vector<double> x = RandomValuesOf(dtype, Numel(shape), seed++, -10.0, 10.0);
      std::vector<double> want;
      for (size_t r = 0; r < x.size() / (2 * n); ++r)
        for (int64_t i = 0; i < n; ++i) {
          const double g = x[r * 2 * n + i], up = x[r * 2 * n + n + i];
          want.push_back(g / (1.0 + std::exp(-g)) * up);
        }
      Shape out_shape = shape;
      out_shape.back() = n;
      Tensor out = Poisoned(out_shape, dtype);
      ops::SiluAndMul(MakeFloat(shape, dtype, x), out);
      // f32: exp(-g)'s relative error grows as |g| u (|g| <= 10), plus 4 roundings.
      const double u = std::ldexp(1.0, -24);
      CheckClose(ReadFloat(out), want, RoundingBar(dtype, {16 * u, 1e-37}), "silu_and_mul");
    }
  }
}

TEST_CASE("silu_and_mul: bad inputs raise with the op name") {
  CheckThrows<std::invalid_argument>([&] { ops::SiluAndMul(Tensor::Empty({2, 7}, DType::kF32, DeviceType::kCPU)); }, "[silu_and_mul] ");
  CheckThrows<std::invalid_argument>([&] { ops::SiluAndMul(Tensor::Empty({}, DType::kF32, DeviceType::kCPU)); }, "[silu_and_mul] ");
  CheckThrows<TypeError>([&] { ops::SiluAndMul(Tensor::Empty({2, 8}, DType::kI32, DeviceType::kCPU)); }, "[silu_and_mul] ");
  Tensor x = Tensor::Empty({2, 8}, DType::kF32, DeviceType::kCPU);
  CheckThrows<std::invalid_argument>([&] { ops::SiluAndMul(x, Tensor::Empty({2, 8}, DType::kF32, DeviceType::kCPU)); }, "[silu_and_mul] ");
  CheckThrows<std::invalid_argument>([&] { ops::SiluAndMul(x, x.Reshape({-1}).Slice(0, 0, 8).Reshape({2, 4})); }, "[silu_and_mul] ");
}
