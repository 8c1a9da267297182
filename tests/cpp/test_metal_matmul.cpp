// Gates of the Metal matmul_bt and matmul kernels (metal/matmul.metal) on the kMETAL
// device (the simulated device in CI, the GPU on a Mac): versus the CPU oracle at real
// and boundary shapes in every float dtype, f32 versus float64, which kernel and
// provider ran, and a row slice of a larger allocation. Outputs are NaN-poisoned before
// each call.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>

#include "metal_op_testing.h"
#include "metalrt/ops.h"

using namespace metalrt;
using namespace metalrt::testing;

namespace {

struct Shape3 {
  int64_t m, k, n;
};

// Worst |metal - oracle| relative to the output's largest magnitude: the oracle and the
// kernels both accumulate in f32 (in different orders), so f32 outputs differ by
// accumulation roundoff and f16/bf16 outputs by at most a rounding step or two.
double WorstBar(DType dtype) {
  if (dtype == DType::kF32) return 1e-5;
  return 4 * UnitRoundoff(dtype);
}

Tensor Product(bool transposed, const Tensor& a, const Tensor& b, const ops::OptTensor& out = std::nullopt) {
  return transposed ? ops::MatmulBT(a, b, out) : ops::Matmul(a, b, out);
}

// Runs a.b^T (transposed) or a.b on Metal and on the CPU oracle with the same inputs and
// checks NMSE and the worst element. Returns the Metal output.
std::vector<double> CheckAgainstOracle(const Shape3& s, DType dtype, uint32_t seed, bool transposed = true) {
  CAPTURE(transposed);
  CAPTURE(std::string(DTypeName(dtype)));
  CAPTURE(s.m);
  CAPTURE(s.k);
  CAPTURE(s.n);
  const Tensor a = MakeFloat({s.m, s.k}, dtype, RandomValuesOf(dtype, s.m * s.k, seed));
  const Shape b_shape = transposed ? Shape{s.n, s.k} : Shape{s.k, s.n};
  const Tensor b = MakeFloat(b_shape, dtype, RandomValuesOf(dtype, s.n * s.k, seed + 1));
  const Tensor out = PoisonedMetal({s.m, s.n}, dtype);
  Product(transposed, ToMetal(a), ToMetal(b), out);
  const std::vector<double> got = ReadMetal(out);
  const std::vector<double> ref = ReadFloat(Product(transposed, a, b));
  if (s.k > 0) CHECK(Nmse(got, ref) <= 5e-4);
  double scale = 0, worst = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    scale = std::max(scale, std::fabs(ref[i]));
    const double e = std::fabs(got[i] - ref[i]);
    if (!(e <= worst)) worst = e;   // NaN propagates
  }
  CHECK(worst <= WorstBar(dtype) * std::max(scale, 1e-30));
  return got;
}

}  // namespace

TEST_CASE("metal matmul_bt and matmul: boundary shapes in every float dtype match the oracle") {
  // m = 1 takes the GEMV, m > 1 the GEMM; 31/32/33 straddle the 32-wide tiles and
  // SIMD-group width; K = 0 is an empty sum (zeros).
  const Shape3 shapes[] = {{1, 1, 1},   {2, 1, 1},   {1, 31, 33}, {1, 33, 5},  {33, 32, 31},
                           {31, 33, 32}, {32, 31, 33}, {3, 7, 65}, {4, 0, 3},   {1, 0, 2},
                           {37, 333, 201}};
  uint32_t seed = 4000;
  for (bool transposed : {true, false})
    for (DType dtype : kFloatDTypes)
      for (const Shape3& s : shapes) {
        const std::vector<double> got = CheckAgainstOracle(s, dtype, seed, transposed);
        seed += 2;
        if (s.k == 0)
          for (double v : got) CHECK(v == 0.0);
      }
}

TEST_CASE("metal matmul_bt: real shapes match the oracle (NMSE <= 5e-4)") {
  // Decode GEMV, batched decode (m = 2, 16), prefill and the ragged gate shape; the
  // model dtype bf16 at the large shapes, f16/f32 at the others.
  CheckAgainstOracle({1, 2048, 2048}, DType::kBF16, 10);
  CheckAgainstOracle({1, 2048, 2048}, DType::kF16, 12);
  CheckAgainstOracle({2, 2048, 2048}, DType::kBF16, 14);
  CheckAgainstOracle({16, 2048, 2048}, DType::kF16, 16);
  CheckAgainstOracle({37, 333, 201}, DType::kBF16, 18);
  CheckAgainstOracle({32, 2048, 6144}, DType::kBF16, 20);
}

// The largest gate (2 GFLOP): about 50 s of CPU on the simulated device, its own case so
// a local run can leave it out with -tce.
TEST_CASE("metal matmul_bt: 512x2048x2048 prefill matches the oracle (NMSE <= 5e-4)") {
  CheckAgainstOracle({512, 2048, 2048}, DType::kBF16, 22);
}

TEST_CASE("metal matmul_bt: f32 GEMV and GEMM versus float64 (NMSE <= 1e-10)") {
  const Shape3 shapes[] = {{1, 2048, 2048}, {37, 333, 201}, {64, 1024, 96}};
  uint32_t seed = 5000;
  for (const Shape3& s : shapes) {
    CAPTURE(s.m);
    const std::vector<double> a = RandomValuesOf(DType::kF32, s.m * s.k, seed++);
    const std::vector<double> b = RandomValuesOf(DType::kF32, s.n * s.k, seed++);
    const Tensor out = PoisonedMetal({s.m, s.n}, DType::kF32);
    ops::MatmulBT(ToMetal(MakeFloat({s.m, s.k}, DType::kF32, a)),
                  ToMetal(MakeFloat({s.n, s.k}, DType::kF32, b)), out);
    std::vector<double> ref(static_cast<size_t>(s.m * s.n), 0.0);
    for (int64_t i = 0; i < s.m; ++i)
      for (int64_t j = 0; j < s.n; ++j)
        for (int64_t p = 0; p < s.k; ++p) ref[i * s.n + j] += a[i * s.k + p] * b[j * s.k + p];
    CHECK(Nmse(ReadMetal(out), ref) <= 1e-10);
  }
}

TEST_CASE("metal matmul_bt and matmul: the GEMV runs for m = 1 and the GEMM for m > 1, natively") {
  for (bool transposed : {true, false})
    for (DType dtype : kFloatDTypes) {
      const std::string op = transposed ? "matmul_bt" : "matmul";
      CAPTURE(op);
      CAPTURE(std::string(DTypeName(dtype)));
      const std::string suffix = gpu::KernelDTypeSuffix(dtype);
      const Tensor b = ToMetal(MakeFloat({40, 64}, dtype, RandomValuesOf(dtype, 40 * 64, 77)));
      const int64_t n = transposed ? 40 : 64, k = transposed ? 64 : 40;
      for (int64_t m : {1, 2, 16}) {
        CAPTURE(m);
        const Tensor a = ToMetal(MakeFloat({m, k}, dtype, RandomValuesOf(dtype, m * k, 78)));
        ResetProviderStats();
        const auto rows = ProfiledRows([&] { Product(transposed, a, b, PoisonedMetal({m, n}, dtype)); });
        CHECK(Dispatches(rows, op + "_gemv_" + suffix) == (m == 1 ? 1u : 0u));
        CHECK(Dispatches(rows, op + "_gemm_" + suffix) == (m == 1 ? 0u : 1u));
        CheckNativeProvider(op, "metal_" + op, 1);
      }
    }
}

TEST_CASE("metal matmul_bt: rows [1, 3) of a 4-row allocation change only those rows") {
  const int64_t k = 45, n = 37;
  const std::vector<double> av = RandomValuesOf(DType::kF32, 4 * k, 90);
  const Tensor a_cpu = MakeFloat({4, k}, DType::kF32, av);
  const Tensor b_cpu = MakeFloat({n, k}, DType::kF32, RandomValuesOf(DType::kF32, n * k, 91));
  const Tensor a = ToMetal(a_cpu), b = ToMetal(b_cpu);
  for (int64_t rows : {1, 2}) {   // [1, 2) takes the GEMV, [1, 3) the GEMM
    CAPTURE(rows);
    const Tensor out = PoisonedMetal({4, n}, DType::kF32);
    ops::MatmulBT(a.Slice(0, 1, 1 + rows), b, out.Slice(0, 1, 1 + rows));
    const std::vector<double> got = ReadMetal(out);
    const std::vector<double> ref = ReadFloat(ops::MatmulBT(a_cpu.Slice(0, 1, 1 + rows), b_cpu));
    for (int64_t r = 0; r < 4; ++r)
      for (int64_t j = 0; j < n; ++j) {
        const double v = got[r * n + j];
        if (r >= 1 && r < 1 + rows) CHECK(std::fabs(v - ref[(r - 1) * n + j]) <= 1e-5);
        else CHECK(std::isnan(v));
      }
  }
}
