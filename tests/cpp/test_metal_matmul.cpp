// Gates of the Metal matmul_bt and matmul kernels (metal/matmul.metal): op cases for
// the op-case table (test_op_cases.cpp) at real and boundary shapes in every float
// dtype; and here f32 versus float64, which kernel and provider ran per m, and a row
// slice of a larger allocation. Outputs are NaN-poisoned before each call.
#include <doctest/doctest.h>

#include <cmath>

#include "metal_op_testing.h"
#include "metalrt/ops.h"
#include "op_cases.h"

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

// One oracle-parity case of a.b^T (transposed) or a.b: NMSE <= 5e-4 and every element
// within WorstBar of the output's largest magnitude. The profiler must show the GEMV for
// m = 1 and the GEMM for m > 1.
OpCase ProductCase(const Shape3& s, DType dtype, uint32_t seed, bool transposed = true) {
  const std::string op = transposed ? "matmul_bt" : "matmul";
  const Tensor a = MakeFloat({s.m, s.k}, dtype, RandomValuesOf(dtype, s.m * s.k, seed));
  const Shape b_shape = transposed ? Shape{s.n, s.k} : Shape{s.k, s.n};
  const Tensor b = MakeFloat(b_shape, dtype, RandomValuesOf(dtype, s.n * s.k, seed + 1));
  OpCase c = SingleOutputCase(CaseName(op, dtype, {s.m, s.k, s.n}), op,
                              gpu::KernelName(op, s.m == 1 ? "gemv" : "gemm", dtype), {a, b}, {{s.m, s.n}, dtype},
                              {0.0, 0.0}, [transposed](const Inputs& in, const Tensor& out) {
                                Product(transposed, in[0], in[1], out);
                              });
  // K = 0 is an empty sum: the reference is all zeros and the bar demands exact zeros.
  c.max_rel = WorstBar(dtype);
  return c;
}

}  // namespace

METALRT_OP_CASES(matmul_cases) {
  std::vector<OpCase> cases;
  // m = 1 takes the GEMV, m > 1 the GEMM; 31/32/33 straddle the 32-wide tiles and
  // SIMD-group width; K = 0 is an empty sum (zeros).
  const Shape3 boundary[] = {{1, 1, 1},   {2, 1, 1},   {1, 31, 33}, {1, 33, 5},  {33, 32, 31},
                             {31, 33, 32}, {32, 31, 33}, {3, 7, 65}, {4, 0, 3},   {1, 0, 2},
                             {37, 333, 201}};
  uint32_t seed = 4000;
  for (bool transposed : {true, false})
    for (DType dtype : kFloatDTypes)
      for (const Shape3& s : boundary) {
        cases.push_back(ProductCase(s, dtype, seed, transposed));
        seed += 2;
      }
  // Real shapes: decode GEMV, batched decode (m = 2, 16) and prefill (the 512-row one is
  // 2 GFLOP, about 50 s of CPU on the simulated device); the model dtype bf16 at the
  // large shapes, f16 at some others. The ragged 37x333x201 is among the boundary shapes.
  cases.push_back(ProductCase({1, 2048, 2048}, DType::kBF16, 10));
  cases.push_back(ProductCase({1, 2048, 2048}, DType::kF16, 12));
  cases.push_back(ProductCase({2, 2048, 2048}, DType::kBF16, 14));
  cases.push_back(ProductCase({16, 2048, 2048}, DType::kF16, 16));
  cases.push_back(ProductCase({32, 2048, 6144}, DType::kBF16, 20));
  cases.push_back(ProductCase({512, 2048, 2048}, DType::kBF16, 22));
  return cases;
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
