// Gates of the Metal softmax kernel (metal/softmax.metal) on the kMETAL device versus
// the CPU oracle on the same inputs: every float dtype, row widths around the SIMD
// width and the 256-thread row, large logits (the max subtraction), and proof that the
// native provider ran. Outputs are NaN-poisoned before each call.
#include <doctest/doctest.h>

#include "metal_op_testing.h"

using namespace metalrt;
using namespace metalrt::testing;

TEST_CASE("metal softmax: every float dtype and row width matches the oracle, natively") {
  const int64_t widths[] = {1, 31, 32, 33, 576, 4099};
  uint32_t seed = 500;
  for (DType dtype : kFloatDTypes)
    for (int64_t n : widths) {
      CAPTURE(std::string(DTypeName(dtype)));
      CAPTURE(n);
      // Logits up to 80 overflow exp in f32 without the max subtraction.
      const Tensor x = MakeFloat({3, n}, dtype, RandomValuesOf(dtype, 3 * n, seed++, 60.0, 80.0));
      // exp in MSL is within a few ulp of std::exp, and the two sums of 4099 positive
      // terms (tree vs index order) differ by up to ~n u / 2 at worst.
      CheckParity("softmax", "metal_softmax", "softmax_row", {x}, dtype, OracleBar(dtype, 5e-5, 1e-12),
                  [](const std::vector<Tensor>& in, const ops::OptTensor& out) { return ops::Softmax(in[0], out); });
    }
}
