// Op cases of the Metal layer_norm kernel (metal/layer_norm.metal) for the op-case table
// (test_op_cases.cpp): every float dtype, row widths around the SIMD width and the
// 256-thread row, with and without bias.
#include <doctest/doctest.h>

#include "metal_op_testing.h"
#include "op_cases.h"

using namespace metalrt;
using namespace metalrt::testing;

METALRT_OP_CASES(layer_norm_cases) {
  std::vector<OpCase> cases;
  uint32_t seed = 400;
  for (DType dtype : kFloatDTypes)
    for (int64_t n : {1, 31, 32, 33, 576, 4099})
      for (bool with_bias : {false, true}) {
        // An offset mean makes the two-pass variance matter.
        const Tensor x = MakeFloat({3, n}, dtype, RandomValuesOf(dtype, 3 * n, seed++, -1.0, 3.0));
        const Tensor w = MakeFloat({n}, dtype, RandomValuesOf(dtype, n, seed++, -0.5, 1.5));
        const Tensor b = MakeFloat({n}, dtype, RandomValuesOf(dtype, n, seed++));
        // Width 1: x - mean is 0 exactly, the output is the bias; a 1e-4 absolute floor
        // covers outputs near zero, where f32 cancellation in x - mean dominates.
        cases.push_back(SingleOutputCase(
            CaseName("layer_norm", dtype, {3, n}, with_bias ? "bias" : "no_bias"), "layer_norm",
            gpu::KernelName("layer_norm", "row", dtype), {x, w, b}, {{3, n}, dtype}, OracleBar(dtype, 1e-5, 1e-4),
            [with_bias](const Inputs& in, const Tensor& out) {
              ops::LayerNorm(in[0], in[1], with_bias ? in[2] : Tensor(), 1e-5f, out);
            }));
      }
  return cases;
}
