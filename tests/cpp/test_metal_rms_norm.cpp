// Gates of the Metal rms_norm kernel (metal/rms_norm.metal): op cases for the op-case
// table (test_op_cases.cpp) in every float dtype, row widths around the SIMD width and
// the 256-thread row; and a row slice of a larger allocation.
#include <doctest/doctest.h>

#include <cmath>

#include "metal_op_testing.h"
#include "op_cases.h"

using namespace metalrt;
using namespace metalrt::testing;

METALRT_OP_CASES(rms_norm_cases) {
  std::vector<OpCase> cases;
  uint32_t seed = 300;
  for (DType dtype : kFloatDTypes)
    for (int64_t n : {1, 31, 32, 33, 576, 4099}) {
      const Tensor x = MakeFloat({3, n}, dtype, RandomValuesOf(dtype, 3 * n, seed++, -3.0, 3.0));
      const Tensor w = MakeFloat({n}, dtype, RandomValuesOf(dtype, n, seed++, -0.5, 1.5));
      cases.push_back(SingleOutputCase(
          CaseName("rms_norm", dtype, {3, n}, ""), "rms_norm", gpu::KernelName("rms_norm", "row", dtype), {x, w},
          {{3, n}, dtype}, OracleBar(dtype, 1e-5),
          [](const Inputs& in, const Tensor& out) { ops::RmsNorm(in[0], in[1], 1e-6f, out); }));
    }
  return cases;
}

TEST_CASE("metal rms_norm: rows [1, 3) of a 4-row allocation change only those rows") {
  const int64_t n = 45;
  const Tensor x_cpu = MakeFloat({4, n}, DType::kF32, RandomValuesOf(DType::kF32, 4 * n, 320));
  const Tensor w_cpu = MakeFloat({n}, DType::kF32, RandomValuesOf(DType::kF32, n, 321));
  const Tensor out = PoisonedMetal({4, n}, DType::kF32);
  ops::RmsNorm(ToMetal(x_cpu).Slice(0, 1, 3), ToMetal(w_cpu), 1e-5f, out.Slice(0, 1, 3));
  const std::vector<double> got = ReadMetal(out);
  const std::vector<double> ref = ReadFloat(ops::RmsNorm(x_cpu.Slice(0, 1, 3), w_cpu, 1e-5f));
  for (int64_t r = 0; r < 4; ++r)
    for (int64_t j = 0; j < n; ++j) {
      const double v = got[r * n + j];
      if (r == 1 || r == 2) CHECK(std::fabs(v - ref[(r - 1) * n + j]) <= 1e-5 * std::fabs(ref[(r - 1) * n + j]) + 1e-6);
      else CHECK(std::isnan(v));
    }
}
