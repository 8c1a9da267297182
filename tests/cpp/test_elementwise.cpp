// Gates of add, mul, relu, gelu against float64 references.
#include <doctest/doctest.h>

#include <cmath>

#include "metalrt/ops.h"
#include "op_testing.h"

using namespace metalrt;
using namespace metalrt::testing;

namespace {

// a's shape with each broadcast form of b: full shape, trailing suffixes, scalar.
const Shape kShapes[] = {{1}, {31}, {32}, {33}, {3, 7}, {2, 3, 17}, {4, 1, 9}};

std::vector<Shape> Suffixes(const Shape& s) {
  std::vector<Shape> out;
  for (size_t drop = 0; drop <= s.size(); ++drop) out.emplace_back(s.begin() + drop, s.end());
  return out;
}

void CheckBinary(Tensor (*op)(const Tensor&, const Tensor&, const ops::OptTensor&),
                 double (*ref)(double, double)) {
  uint32_t seed = 1;
  for (DType dtype : kFloatDTypes) {
    for (const Shape& shape : kShapes) {
      for (const Shape& bshape : Suffixes(shape)) {
        CAPTURE(std::string(DTypeName(dtype)));
        CAPTURE(ShapeToString(shape));
        CAPTURE(ShapeToString(bshape));
        Tensor a = MakeFloat(shape, dtype, RandomValuesOf(dtype, Numel(shape), seed++));
        const std::vector<double> av = ReadFloat(a);
        const int64_t inner = Numel(bshape);
        const std::vector<double> bv = RandomValuesOf(dtype, inner, seed++);
        Tensor b = MakeFloat(bshape, dtype, bv);
        // f32 computes the exact result rounded once (innocuous double rounding), so the
        // bar is bit equality with the float64 result rounded to the dtype.
        std::vector<double> want(av.size());
        for (size_t i = 0; i < av.size(); ++i) want[i] = RoundTo(ref(av[i], bv[i % inner]), dtype);
        Tensor out = Poisoned(shape, dtype);
        op(a, b, out);
        CHECK(ReadFloat(out) == want);
        CHECK(ReadFloat(op(a, b, std::nullopt)) == want);
        op(a, b, a);   // out = a: the in-place form ops.h allows
        CHECK(ReadFloat(a) == want);
      }
    }
  }
}

}  // namespace

TEST_CASE("add: correctly rounded, every float dtype, trailing-suffix broadcast, out = a") {
  CheckBinary(ops::Add, [](double x, double y) { return x + y; });
}

TEST_CASE("mul: correctly rounded, every float dtype, trailing-suffix broadcast, out = a") {
  CheckBinary(ops::Mul, [](double x, double y) { return x * y; });
}

TEST_CASE("relu: exact, NaN propagates") {
  for (DType dtype : kFloatDTypes) {
    CAPTURE(std::string(DTypeName(dtype)));
    std::vector<double> x = RandomValuesOf(dtype, 33, 7);
    x[0] = 0.0;
    x[1] = std::numeric_limits<double>::quiet_NaN();
    x[2] = -INFINITY;
    x[3] = INFINITY;
    Tensor out = Poisoned({33}, dtype);
    ops::Relu(MakeFloat({33}, dtype, x), out);
    const std::vector<double> got = ReadFloat(out);
    CHECK(std::isnan(got[1]));
    for (size_t i = 0; i < x.size(); ++i)
      if (i != 1) CHECK(got[i] == (x[i] > 0 ? x[i] : 0.0));
  }
}

TEST_CASE("gelu (tanh): against float64, every float dtype, tails and specials") {
  // f32: the relative error of exp(-2u) grows as 2|u| eps (|u| <= ~70 here; measured
  // worst 7e-6); the absolute floor covers results where exp overflows near f32's
  // smallest normal (true value ~3e-38, computed -0).
  const Bar f32_bar{2e-5, 1e-36};
  for (DType dtype : kFloatDTypes) {
    for (int64_t n : {1, 31, 32, 33, 1000}) {
      CAPTURE(std::string(DTypeName(dtype)));
      CAPTURE(n);
      std::vector<double> x = RandomValuesOf(dtype, n, 11 + static_cast<uint32_t>(n), -12.0, 12.0);
      if (n == 1000) {
        x[0] = 0.0;
        x[1] = RoundTo(1e20, dtype);    // x^3 overflows f32: the result must still be x
        x[2] = RoundTo(-1e20, dtype);   // (f16 holds +-Inf here)
        x[3] = INFINITY;
      }
      std::vector<double> want(x.size());
      for (size_t i = 0; i < x.size(); ++i) {
        const double u = std::sqrt(2.0 / M_PI) * (x[i] + 0.044715 * x[i] * x[i] * x[i]);
        // 0.5 x (1 + tanh u); for u < 0 as x e^{2u} / (1 + e^{2u}), where 1 + tanh u cancels.
        const double e = std::exp(2.0 * u);
        want[i] = std::isinf(x[i]) ? (x[i] > 0 ? x[i] : 0.0)
                  : u < 0        ? x[i] * e / (1.0 + e)
                                 : 0.5 * x[i] * (1.0 + std::tanh(u));
      }
      Tensor out = Poisoned({n}, dtype);
      ops::Gelu(MakeFloat({n}, dtype, x), out);
      CheckClose(ReadFloat(out), want, RoundingBar(dtype, f32_bar), "gelu");
    }
  }
}

TEST_CASE("elementwise: bad inputs raise with the op name") {
  Tensor a = MakeFloat({2, 3}, DType::kF32, RandomValuesOf(DType::kF32, 6, 1));
  Tensor b3 = MakeFloat({3}, DType::kF32, RandomValuesOf(DType::kF32, 3, 2));
  Tensor ints = Tensor::Empty({2, 3}, DType::kI32, DeviceType::kCPU);
  CheckThrows<TypeError>([&] { ops::Add(ints, ints); }, "[add] ");
  CheckThrows<TypeError>([&] { ops::Mul(a, Tensor::Empty({3}, DType::kF16, DeviceType::kCPU)); }, "[mul] ");
  CheckThrows<std::invalid_argument>([&] { ops::Add(a, Tensor::Empty({2}, DType::kF32, DeviceType::kCPU)); }, "[add] ");
  CheckThrows<std::invalid_argument>([&] { ops::Add(a, Tensor::Empty({1, 2, 3}, DType::kF32, DeviceType::kCPU)); }, "[add] ");
  CheckThrows<std::invalid_argument>([&] { ops::Add(a, Tensor()); }, "[add] ");
  CheckThrows<std::invalid_argument>([&] { ops::Add(a, b3, Tensor::Empty({3, 2}, DType::kF32, DeviceType::kCPU)); }, "[add] ");
  CheckThrows<TypeError>([&] { ops::Add(a, b3, Tensor::Empty({2, 3}, DType::kF16, DeviceType::kCPU)); }, "[add] ");
  CheckThrows<std::invalid_argument>([&] { ops::Add(a.Slice(1, 0, 2), a.Slice(1, 1, 3)); }, "[add] ");  // non-contiguous
  // out overlapping a without being a, or overlapping b, is refused.
  Tensor big = Tensor::Empty({7}, DType::kF32, DeviceType::kCPU);
  Tensor x6 = big.Slice(0, 0, 6);
  CheckThrows<std::invalid_argument>([&] { ops::Add(x6, x6, big.Slice(0, 1, 7)); }, "[add] ");
  Tensor holder = Tensor::Empty({2, 3}, DType::kF32, DeviceType::kCPU);
  CheckThrows<std::invalid_argument>([&] { ops::Add(a, holder.Slice(0, 1, 2).Reshape({3}), holder); }, "[add] ");
  CheckThrows<TypeError>([&] { ops::Relu(ints); }, "[relu] ");
  CheckThrows<TypeError>([&] { ops::Gelu(Tensor::Empty({4}, DType::kU8, DeviceType::kCPU)); }, "[gelu] ");
  CheckThrows<std::invalid_argument>([&] { ops::Gelu(a, Tensor::Empty({6}, DType::kF32, DeviceType::kCPU)); }, "[gelu] ");
  CheckThrows<std::invalid_argument>([&] { ops::Relu(a, a); }, "[relu] ");   // relu has no in-place form
}
