// Gates of the Metal rms_norm kernel (metal/rms_norm.metal) on the kMETAL device versus
// the CPU oracle on the same inputs: every float dtype, row widths around the SIMD
// width and the 256-thread row, unit_offset, a row slice of a larger allocation, and
// proof that the native provider ran. Outputs are NaN-poisoned before each call.
#include <doctest/doctest.h>

#include <cmath>

#include "metal_op_testing.h"

using namespace metalrt;
using namespace metalrt::testing;

TEST_CASE("metal rms_norm: every float dtype and row width matches the oracle, natively") {
  const int64_t widths[] = {1, 31, 32, 33, 576, 4099};
  uint32_t seed = 300;
  for (DType dtype : kFloatDTypes)
    for (int64_t n : widths)
      for (bool unit_offset : {false, true}) {
        CAPTURE(std::string(DTypeName(dtype)));
        CAPTURE(n);
        CAPTURE(unit_offset);
        const Tensor x = MakeFloat({3, n}, dtype, RandomValuesOf(dtype, 3 * n, seed++, -3.0, 3.0));
        const Tensor w = MakeFloat({n}, dtype, RandomValuesOf(dtype, n, seed++, -0.5, 1.5));
        CheckParity("rms_norm", "metal_rms_norm", "rms_norm_row", {x, w}, dtype, OracleBar(dtype, 1e-5),
                    [&](const std::vector<Tensor>& in, const ops::OptTensor& out) {
                      return ops::RmsNorm(in[0], in[1], 1e-6f, unit_offset, out);
                    });
      }
}

TEST_CASE("metal rms_norm: rows [1, 3) of a 4-row allocation change only those rows") {
  const int64_t n = 45;
  const Tensor x_cpu = MakeFloat({4, n}, DType::kF32, RandomValuesOf(DType::kF32, 4 * n, 320));
  const Tensor w_cpu = MakeFloat({n}, DType::kF32, RandomValuesOf(DType::kF32, n, 321));
  const Tensor out = PoisonedMetal({4, n}, DType::kF32);
  ops::RmsNorm(ToMetal(x_cpu).Slice(0, 1, 3), ToMetal(w_cpu), 1e-5f, false, out.Slice(0, 1, 3));
  const std::vector<double> got = ReadMetal(out);
  const std::vector<double> ref = ReadFloat(ops::RmsNorm(x_cpu.Slice(0, 1, 3), w_cpu, 1e-5f));
  for (int64_t r = 0; r < 4; ++r)
    for (int64_t j = 0; j < n; ++j) {
      const double v = got[r * n + j];
      if (r == 1 || r == 2) CHECK(std::fabs(v - ref[(r - 1) * n + j]) <= 1e-5 * std::fabs(ref[(r - 1) * n + j]) + 1e-6);
      else CHECK(std::isnan(v));
    }
}
