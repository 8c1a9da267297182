// Gates of the Metal layer_norm kernel (metal/layer_norm.metal) on the kMETAL device
// versus the CPU oracle on the same inputs: every float dtype, row widths around the
// SIMD width and the 256-thread row, with and without bias, and proof that the native
// provider ran. Outputs are NaN-poisoned before each call.
#include <doctest/doctest.h>

#include "metal_op_testing.h"

using namespace metalrt;
using namespace metalrt::testing;

TEST_CASE("metal layer_norm: every float dtype and row width matches the oracle, natively") {
  const int64_t widths[] = {1, 31, 32, 33, 576, 4099};
  uint32_t seed = 400;
  for (DType dtype : kFloatDTypes)
    for (int64_t n : widths)
      for (bool with_bias : {false, true}) {
        CAPTURE(std::string(DTypeName(dtype)));
        CAPTURE(n);
        CAPTURE(with_bias);
        // An offset mean makes the two-pass variance matter.
        const Tensor x = MakeFloat({3, n}, dtype, RandomValuesOf(dtype, 3 * n, seed++, -1.0, 3.0));
        const Tensor w = MakeFloat({n}, dtype, RandomValuesOf(dtype, n, seed++, -0.5, 1.5));
        const Tensor b = MakeFloat({n}, dtype, RandomValuesOf(dtype, n, seed++));
        // Width 1: x - mean is 0 exactly, the output is the bias; a 1e-4 absolute floor
        // covers outputs near zero, where f32 cancellation in x - mean dominates.
        CheckParity("layer_norm", "metal_layer_norm", "layer_norm_row", {x, w, b}, dtype,
                    OracleBar(dtype, 1e-5, 1e-4),
                    [&](const std::vector<Tensor>& in, const ops::OptTensor& out) {
                      return ops::LayerNorm(in[0], in[1], with_bias ? in[2] : Tensor(), 1e-5f, out);
                    });
      }
}
