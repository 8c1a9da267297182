// Gates of rms_norm against float64.
#include <doctest/doctest.h>

#include <cmath>

#include "metalrt/ops.h"
#include "op_testing.h"

using namespace metalrt;
using namespace metalrt::testing;

namespace {

// float64 RMSNorm of each row (Zhang & Sennrich 2019).
std::vector<double> Reference(const std::vector<double>& x, const std::vector<double>& w, int64_t n,
                              double eps) {
  std::vector<double> y(x.size());
  for (size_t r = 0; r < x.size() / n; ++r) {
    double ss = 0.0;
    for (int64_t i = 0; i < n; ++i) ss += x[r * n + i] * x[r * n + i];
    const double inv = 1.0 / std::sqrt(ss / n + eps);
    for (int64_t i = 0; i < n; ++i) y[r * n + i] = x[r * n + i] * inv * w[i];
  }
  return y;
}

}  // namespace

TEST_CASE("rms_norm: against float64, every float dtype, odd widths, weights around 0 and 1") {
  const Shape shapes[] = {{1, 1}, {3, 31}, {2, 32}, {5, 33}, {4, 576}, {2, 3, 64}, {7}};
  uint32_t seed = 100;
  for (DType dtype : kFloatDTypes) {
    for (const Shape& shape : shapes) {
      for (double w_center : {0.0, 1.0}) {
        CAPTURE(std::string(DTypeName(dtype)));
        CAPTURE(ShapeToString(shape));
        CAPTURE(w_center);
        const int64_t n = shape.back();
        const std::vector<double> x = RandomValuesOf(dtype, Numel(shape), seed++, -3.0, 3.0);
        const std::vector<double> w = RandomValuesOf(dtype, n, seed++, w_center - 0.5, w_center + 0.5);
        const float eps = 1e-5f;
        Tensor out = Poisoned(shape, dtype);
        ops::RmsNorm(MakeFloat(shape, dtype, x), MakeFloat({n}, dtype, w), eps, out);
        // f32 bar from the error analysis: the sequential sum of n squares carries up to
        // n u relative error (u = 2^-24), the square root halves it, 4 more roundings.
        const double u = std::ldexp(1.0, -24);
        const Bar bar = RoundingBar(dtype, {(n / 2.0 + 6) * u, 0.0});
        CheckClose(ReadFloat(out), Reference(x, w, n, eps), bar, "rms_norm");
      }
    }
  }
}

TEST_CASE("rms_norm: zero rows give zero (eps keeps the scale finite), eps matters") {
  Tensor x = MakeFloat({2, 4}, DType::kF32, {0, 0, 0, 0, 1e-3, -1e-3, 1e-3, -1e-3});
  Tensor w = MakeFloat({4}, DType::kF32, {1, 1, 1, 1});
  const std::vector<double> got = ReadFloat(ops::RmsNorm(x, w, 1e-6f));
  const std::vector<double> want = Reference(ReadFloat(x), ReadFloat(w), 4, 1e-6f);
  CheckClose(got, want, {1e-6, 0.0}, "rms_norm small rows");
  CHECK(got[4] < 0.8);   // 1e-3 / sqrt(1e-6 + 1e-6): eps is not dropped
}

TEST_CASE("rms_norm: bad inputs raise with the op name") {
  Tensor x = Tensor::Empty({2, 8}, DType::kF32, DeviceType::kCPU);
  Tensor w = Tensor::Empty({8}, DType::kF32, DeviceType::kCPU);
  CheckThrows<std::invalid_argument>([&] { ops::RmsNorm(x, Tensor::Empty({7}, DType::kF32, DeviceType::kCPU), 1e-5f); }, "[rms_norm] ");
  CheckThrows<std::invalid_argument>([&] { ops::RmsNorm(x, Tensor::Empty({1, 8}, DType::kF32, DeviceType::kCPU), 1e-5f); }, "[rms_norm] ");
  CheckThrows<TypeError>([&] { ops::RmsNorm(x, Tensor::Empty({8}, DType::kBF16, DeviceType::kCPU), 1e-5f); }, "[rms_norm] ");
  CheckThrows<TypeError>([&] { ops::RmsNorm(Tensor::Empty({2, 8}, DType::kI32, DeviceType::kCPU), w, 1e-5f); }, "[rms_norm] ");
  CheckThrows<std::invalid_argument>([&] { ops::RmsNorm(Tensor::Empty({}, DType::kF32, DeviceType::kCPU), w, 1e-5f); }, "[rms_norm] ");
  CheckThrows<std::invalid_argument>([&] { ops::RmsNorm(x, w, -1.0f); }, "[rms_norm] ");
  CheckThrows<std::invalid_argument>([&] { ops::RmsNorm(x, w, NAN); }, "[rms_norm] ");
  CheckThrows<std::invalid_argument>([&] { ops::RmsNorm(x, w, 1e-5f, Tensor::Empty({8, 2}, DType::kF32, DeviceType::kCPU)); }, "[rms_norm] ");
  CheckThrows<TypeError>([&] { ops::RmsNorm(x, w, 1e-5f, Tensor::Empty({2, 8}, DType::kF16, DeviceType::kCPU)); }, "[rms_norm] ");
  CheckThrows<std::invalid_argument>([&] { ops::RmsNorm(x, w, 1e-5f, x); }, "[rms_norm] ");
  CheckThrows<std::invalid_argument>([&] { ops::RmsNorm(x.Slice(1, 0, 4), w.Slice(0, 0, 4), 1e-5f); }, "[rms_norm] ");
  CheckThrows<std::invalid_argument>([&] { ops::RmsNorm(x, Tensor(), 1e-5f); }, "[rms_norm] ");
}
