// Op cases of the Metal softmax kernel (metal/softmax.metal) for the op-case table
// (test_op_cases.cpp): every float dtype, row widths around the SIMD width and the
// 256-thread row, large logits (the max subtraction).
#include <doctest/doctest.h>

#include "metal_op_testing.h"
#include "op_cases.h"

using namespace metalrt;
using namespace metalrt::testing;

METALRT_OP_CASES(softmax_cases) {
  std::vector<OpCase> cases;
  uint32_t seed = 500;
  for (DType dtype : kFloatDTypes)
    for (int64_t n : {1, 31, 32, 33, 576, 4099}) {
      // Logits up to 80 overflow exp in f32 without the max subtraction.
      const Tensor x = MakeFloat({3, n}, dtype, RandomValuesOf(dtype, 3 * n, seed++, 60.0, 80.0));
      // exp in MSL is within a few ulp of std::exp, and the two sums of 4099 positive
      // terms (tree vs index order) differ by up to ~n u / 2 at worst.
      cases.push_back(SingleOutputCase(CaseName("softmax", dtype, {3, n}), "softmax",
                                       gpu::KernelName("softmax", "row", dtype), {x}, {{3, n}, dtype},
                                       OracleBar(dtype, 5e-5, 1e-12),
                                       [](const Inputs& in, const Tensor& out) { ops::Softmax(in[0], out); }));
    }
  return cases;
}
