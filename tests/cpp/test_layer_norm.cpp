// Gates of layer_norm (with and without bias) against float64.
#include <doctest/doctest.h>

#include <cmath>

#include "metalrt/ops.h"
#include "op_testing.h"

using namespace metalrt;
using namespace metalrt::testing;

namespace {

// float64 LayerNorm of each row (Ba, Kiros & Hinton 2016), biased variance.
std::vector<double> Reference(const std::vector<double>& x, const std::vector<double>& w,
                              const std::vector<double>& b, int64_t n, double eps) {
  std::vector<double> y(x.size());
  for (size_t r = 0; r < x.size() / n; ++r) {
    double mean = 0.0, var = 0.0;
    for (int64_t i = 0; i < n; ++i) mean += x[r * n + i];
    mean /= n;
    for (int64_t i = 0; i < n; ++i) var += (x[r * n + i] - mean) * (x[r * n + i] - mean);
    var /= n;
    for (int64_t i = 0; i < n; ++i)
      y[r * n + i] = (x[r * n + i] - mean) / std::sqrt(var + eps) * w[i] + (b.empty() ? 0.0 : b[i]);
  }
  return y;
}

}  // namespace

TEST_CASE("layer_norm: against float64, every float dtype, odd widths, optional bias") {
  const Shape shapes[] = {{1, 1}, {3, 31}, {2, 32}, {5, 33}, {4, 768}, {2, 3, 17}};
  uint32_t seed = 200;
  for (DType dtype : kFloatDTypes) {
    for (const Shape& shape : shapes) {
      for (bool with_bias : {true, false}) {
        CAPTURE(std::string(DTypeName(dtype)));
        CAPTURE(ShapeToString(shape));
        CAPTURE(with_bias);
        const int64_t n = shape.back();
        // An offset mean (x in [1, 5)) makes the subtraction of the mean matter.
        const std::vector<double> x = RandomValuesOf(dtype, Numel(shape), seed++, 1.0, 5.0);
        const std::vector<double> w = RandomValuesOf(dtype, n, seed++, 0.5, 1.5);
        const std::vector<double> b = with_bias ? RandomValuesOf(dtype, n, seed++, -1.0, 1.0) : std::vector<double>();
        const float eps = 1e-5f;
        Tensor out = Poisoned(shape, dtype);
        ops::LayerNorm(MakeFloat(shape, dtype, x), MakeFloat({n}, dtype, w),
                       with_bias ? MakeFloat({n}, dtype, b) : Tensor(), eps, out);
        // f32: the mean and the variance are sequential sums (up to n u relative each,
        // u = 2^-24, on values of size ~|x|, here up to 5x the deviation); outputs are
        // O(1), so the bar is absolute plus a few roundings relative.
        const double u = std::ldexp(1.0, -24);
        const Bar bar = RoundingBar(dtype, {8 * u, (5.0 * n + 8) * u});
        CheckClose(ReadFloat(out), Reference(x, w, b, n, eps), bar, "layer_norm");
      }
    }
  }
}

TEST_CASE("layer_norm: bad inputs raise with the op name") {
  Tensor x = Tensor::Empty({2, 8}, DType::kF16, DeviceType::kCPU);
  Tensor w = Tensor::Empty({8}, DType::kF16, DeviceType::kCPU);
  CheckThrows<std::invalid_argument>([&] { ops::LayerNorm(x, w, Tensor::Empty({9}, DType::kF16, DeviceType::kCPU), 1e-5f); }, "[layer_norm] ");
  CheckThrows<TypeError>([&] { ops::LayerNorm(x, w, Tensor::Empty({8}, DType::kF32, DeviceType::kCPU), 1e-5f); }, "[layer_norm] ");
  CheckThrows<std::invalid_argument>([&] { ops::LayerNorm(x, Tensor::Empty({2, 8}, DType::kF16, DeviceType::kCPU), Tensor(), 1e-5f); }, "[layer_norm] ");
  CheckThrows<TypeError>([&] { ops::LayerNorm(Tensor::Empty({2, 8}, DType::kI64, DeviceType::kCPU), w, Tensor(), 1e-5f); }, "[layer_norm] ");
  CheckThrows<std::invalid_argument>([&] { ops::LayerNorm(x, w, Tensor(), -1e-5f); }, "[layer_norm] ");
  CheckThrows<std::invalid_argument>([&] { ops::LayerNorm(x, w, Tensor(), 1e-5f, Tensor::Empty({2, 7}, DType::kF16, DeviceType::kCPU)); }, "[layer_norm] ");
  CheckThrows<std::invalid_argument>([&] { ops::LayerNorm(x, w, Tensor(), 1e-5f, x); }, "[layer_norm] ");
}
