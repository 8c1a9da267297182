// Gates of softmax against float64.
#include <doctest/doctest.h>

#include <cmath>

#include "metalrt/ops.h"
#include "op_testing.h"

using namespace metalrt;
using namespace metalrt::testing;

namespace {

std::vector<double> Reference(const std::vector<double>& x, int64_t n) {
  std::vector<double> y(x.size());
  for (size_t r = 0; r < x.size() / n; ++r) {
    double m = -INFINITY, s = 0.0;
    for (int64_t i = 0; i < n; ++i) m = std::max(m, x[r * n + i]);
    for (int64_t i = 0; i < n; ++i) s += std::exp(x[r * n + i] - m);
    for (int64_t i = 0; i < n; ++i) y[r * n + i] = std::exp(x[r * n + i] - m) / s;
  }
  return y;
}

}  // namespace

TEST_CASE("softmax: against float64, every float dtype, odd widths, large logits, masked entries") {
  const Shape shapes[] = {{1, 1}, {3, 31}, {2, 32}, {5, 33}, {2, 1000}, {2, 2, 9}};
  uint32_t seed = 300;
  for (DType dtype : kFloatDTypes) {
    for (const Shape& shape : shapes) {
      CAPTURE(std::string(DTypeName(dtype)));
      CAPTURE(ShapeToString(shape));
      const int64_t n = shape.back();
      std::vector<double> x = RandomValuesOf(dtype, Numel(shape), seed++, -8.0, 8.0);
      // Row 0 shifted by +100: exp(x) alone would overflow f32, the max subtraction may not.
      for (int64_t i = 0; i < n; ++i) x[i] = RoundTo(x[i] + 100.0, dtype);
      if (n > 2) x[n - 1] = -INFINITY;   // a masked logit gets exactly 0
      Tensor out = Poisoned(shape, dtype);
      ops::Softmax(MakeFloat(shape, dtype, x), out);
      // f32: exp of the shifted logit (|x - m| <= ~16 -> up to ~16 u), a sequential sum of
      // n positive terms (n u), the division.
      const double u = std::ldexp(1.0, -24);
      const std::vector<double> got = ReadFloat(out);
      CheckClose(got, Reference(x, n), RoundingBar(dtype, {(n + 24.0) * u, 0.0}), "softmax");
      if (n > 2) CHECK(got[n - 1] == 0.0);
    }
  }
}

TEST_CASE("softmax: NaN poisons its row only") {
  Tensor x = MakeFloat({2, 3}, DType::kF32, {1, NAN, 2, 1, 2, 3});
  const std::vector<double> got = ReadFloat(ops::Softmax(x));
  for (int i = 0; i < 3; ++i) CHECK(std::isnan(got[i]));
  CheckClose({got[3], got[4], got[5]}, Reference({1, 2, 3}, 3), {1e-6, 0.0}, "softmax row 1");
}

TEST_CASE("softmax: bad inputs raise with the op name") {
  Tensor x = Tensor::Empty({2, 8}, DType::kBF16, DeviceType::kCPU);
  CheckThrows<TypeError>([&] { ops::Softmax(Tensor::Empty({2, 8}, DType::kI8, DeviceType::kCPU)); }, "[softmax] ");
  CheckThrows<std::invalid_argument>([&] { ops::Softmax(Tensor::Empty({}, DType::kF32, DeviceType::kCPU)); }, "[softmax] ");
  CheckThrows<std::invalid_argument>([&] { ops::Softmax(x.Slice(1, 1, 3)); }, "[softmax] ");
  CheckThrows<std::invalid_argument>([&] { ops::Softmax(x, Tensor::Empty({16}, DType::kBF16, DeviceType::kCPU)); }, "[softmax] ");
  CheckThrows<TypeError>([&] { ops::Softmax(x, Tensor::Empty({2, 8}, DType::kF32, DeviceType::kCPU)); }, "[softmax] ");
  CheckThrows<std::invalid_argument>([&] { ops::Softmax(x, x); }, "[softmax] ");
}
