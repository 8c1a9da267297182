// Gates of matmul and matmul_bt against float64, plus the order invariance the oracle
// promises (blocking, threading and the transposed layout do not change any output).
#include <doctest/doctest.h>

#include <cmath>

#include "metalrt/ops.h"
#include "cpu_oracle_testing.h"
#include "op_testing.h"

using namespace metalrt;
using namespace metalrt::testing;

namespace {

struct Case {
  int64_t m, k, n;
};
// Boundary shapes: length-1 dims, 31/32/33 around the 8-lane and 32-row panel blocking,
// K = 0 (an empty sum is 0), and the 37x333x201 gate shape.
constexpr Case kCases[] = {{1, 1, 1}, {37, 333, 201}, {1, 576, 49}, {3, 31, 33}, {5, 32, 8},
                           {2, 33, 31}, {33, 7, 65}, {4, 0, 3}, {1, 9, 1}};

// ref[i, j] = sum_k a[i, k] * b[k, j] in float64 and the bound on an f32 dot product's
// error: depth (k/8 + 3 additions, 1 product) unit roundoffs of sum_k |a b|.
void Reference(const std::vector<double>& a, const std::vector<double>& b, const Case& c,
               bool b_transposed, std::vector<double>* ref, std::vector<double>* bound) {
  const double u = std::ldexp(1.0, -24);
  ref->assign(c.m * c.n, 0.0);
  bound->assign(c.m * c.n, 0.0);
  for (int64_t i = 0; i < c.m; ++i)
    for (int64_t j = 0; j < c.n; ++j) {
      double s = 0.0, abs_sum = 0.0;
      for (int64_t p = 0; p < c.k; ++p) {
        const double prod = a[i * c.k + p] * (b_transposed ? b[j * c.k + p] : b[p * c.n + j]);
        s += prod;
        abs_sum += std::fabs(prod);
      }
      (*ref)[i * c.n + j] = s;
      (*bound)[i * c.n + j] = (c.k / 8 + 4) * u * abs_sum;
    }
}

void CheckProduct(bool transposed) {
  uint32_t seed = transposed ? 700 : 600;
  for (DType dtype : kFloatDTypes) {
    for (const Case& c : kCases) {
      CAPTURE(std::string(DTypeName(dtype)));
      CAPTURE(c.m);
      CAPTURE(c.k);
      CAPTURE(c.n);
      const std::vector<double> a = RandomValuesOf(dtype, c.m * c.k, seed++);
      const std::vector<double> b = RandomValuesOf(dtype, c.k * c.n, seed++);
      const Shape b_shape = transposed ? Shape{c.n, c.k} : Shape{c.k, c.n};
      Tensor out = Poisoned({c.m, c.n}, dtype);
      Tensor at = MakeFloat({c.m, c.k}, dtype, a), bt = MakeFloat(b_shape, dtype, b);
      if (transposed) ops::MatmulBT(at, bt, out);
      else ops::Matmul(at, bt, out);
      std::vector<double> ref, bound;
      Reference(a, b, c, transposed, &ref, &bound);
      const std::vector<double> got = ReadFloat(out);
      if (c.k == 0) CHECK(got == ref);   // all zeros (written: the output was NaN)
      else if (dtype == DType::kF32) CHECK(Nmse(got, ref) <= 1e-10);
      // Worst element: the f32 dot bound, then the rounding to the output dtype.
      const double out_u = UnitRoundoff(dtype);
      size_t bad = 0;
      for (size_t i = 0; i < got.size(); ++i)
        bad += !(std::fabs(got[i] - ref[i]) <= bound[i] * (1 + out_u) + out_u * std::fabs(ref[i]) + 1e-30);
      CHECK(bad == 0);
    }
  }
}

}  // namespace

TEST_CASE("matmul: against float64 (f32 NMSE <= 1e-10, per-element dot bound), every float dtype") {
  CheckProduct(false);
}

TEST_CASE("matmul_bt: against float64 (f32 NMSE <= 1e-10, per-element dot bound), every float dtype") {
  CheckProduct(true);
}

TEST_CASE("matmul and matmul_bt: bit-identical for one product, any blocking or row split") {
  // B^T materialised: matmul(a, b) and matmul_bt(a, b^T) share the accumulation order.
  // The oracle's property: the BLAS GEMM (m > 16) sums in its own order.
  const OracleOnly matmul_oracle("matmul"), matmul_bt_oracle("matmul_bt");
  for (DType dtype : kFloatDTypes) {
    CAPTURE(std::string(DTypeName(dtype)));
    const int64_t m = 19, k = 77, n = 45;
    const std::vector<double> a = RandomValuesOf(dtype, m * k, 801, -3, 3);
    const std::vector<double> b = RandomValuesOf(dtype, k * n, 802, -3, 3);
    std::vector<double> bt(k * n);
    for (int64_t p = 0; p < k; ++p)
      for (int64_t j = 0; j < n; ++j) bt[j * k + p] = b[p * n + j];
    Tensor at = MakeFloat({m, k}, dtype, a);
    const std::vector<double> full = ReadFloat(ops::Matmul(at, MakeFloat({k, n}, dtype, b)));
    CHECK(ReadFloat(ops::MatmulBT(at, MakeFloat({n, k}, dtype, bt))) == full);
    // Row by row (M = 1 changes the column split across threads) and on a row view.
    for (int64_t i = 0; i < m; ++i) {
      const std::vector<double> row = ReadFloat(ops::MatmulBT(at.Slice(0, i, i + 1), MakeFloat({n, k}, dtype, bt)));
      CHECK(std::equal(row.begin(), row.end(), full.begin() + i * n));
    }
  }
}

TEST_CASE("matmul_bt: a decode-size GEMV [1, 576] x [4099, 576]^T (panel and thread tails)") {
  const int64_t k = 576, n = 4099;
  const std::vector<double> a = RandomValuesOf(DType::kBF16, k, 901);
  const std::vector<double> b = RandomValuesOf(DType::kBF16, n * k, 902);
  Tensor out = Poisoned({1, n}, DType::kBF16);
  ops::MatmulBT(MakeFloat({1, k}, DType::kBF16, a), MakeFloat({n, k}, DType::kBF16, b), out);
  std::vector<double> ref, bound;
  Reference(a, b, {1, k, n}, true, &ref, &bound);
  CHECK(Nmse(ReadFloat(out), ref) <= 1e-5);   // bf16 output rounding: ~u^2/3 = 5e-6
  CheckClose(ReadFloat(out), ref, {UnitRoundoff(DType::kBF16) * 1.01, 1e-6}, "bf16 gemv");
}

TEST_CASE("matmul, matmul_bt: bad inputs raise with the op name") {
  Tensor a = Tensor::Empty({3, 4}, DType::kF32, DeviceType::kCPU);
  CheckThrows<std::invalid_argument>([&] { ops::Matmul(a, Tensor::Empty({5, 2}, DType::kF32, DeviceType::kCPU)); }, "[matmul] ");
  CheckThrows<std::invalid_argument>([&] { ops::MatmulBT(a, Tensor::Empty({2, 5}, DType::kF32, DeviceType::kCPU)); }, "[matmul_bt] ");
  CheckThrows<std::invalid_argument>([&] { ops::Matmul(a.Reshape({12}), Tensor::Empty({4, 2}, DType::kF32, DeviceType::kCPU)); }, "[matmul] ");
  CheckThrows<std::invalid_argument>([&] { ops::MatmulBT(a, Tensor::Empty({1, 2, 4}, DType::kF32, DeviceType::kCPU)); }, "[matmul_bt] ");
  CheckThrows<TypeError>([&] { ops::Matmul(a, Tensor::Empty({4, 2}, DType::kF16, DeviceType::kCPU)); }, "[matmul] ");
  CheckThrows<TypeError>([&] { ops::MatmulBT(Tensor::Empty({3, 4}, DType::kI32, DeviceType::kCPU), Tensor::Empty({2, 4}, DType::kI32, DeviceType::kCPU)); }, "[matmul_bt] ");
  CheckThrows<std::invalid_argument>([&] { ops::Matmul(a, Tensor::Empty({4, 2}, DType::kF32, DeviceType::kCPU), Tensor::Empty({2, 3}, DType::kF32, DeviceType::kCPU)); }, "[matmul] ");
  CheckThrows<TypeError>([&] { ops::MatmulBT(a, Tensor::Empty({2, 4}, DType::kF32, DeviceType::kCPU), Tensor::Empty({3, 2}, DType::kBF16, DeviceType::kCPU)); }, "[matmul_bt] ");
  CheckThrows<std::invalid_argument>([&] { ops::MatmulBT(a.Slice(1, 0, 2), Tensor::Empty({2, 2}, DType::kF32, DeviceType::kCPU)); }, "[matmul_bt] ");
  Tensor sq = Tensor::Empty({4, 4}, DType::kF32, DeviceType::kCPU);
  CheckThrows<std::invalid_argument>([&] { ops::Matmul(sq, sq, sq); }, "[matmul] ");
}
