// Op cases of the Metal elementwise kernels (metal/elementwise.metal) for the op-case
// table (test_op_cases.cpp): add, mul (same shape and the trailing-suffix broadcast),
// relu and gelu in every float dtype, widths around the SIMD width and the 256-thread
// group.
#include <doctest/doctest.h>

#include "metal_op_testing.h"
#include "op_cases.h"

using namespace metalrt;
using namespace metalrt::testing;

namespace {

const int64_t kWidths[] = {1, 31, 32, 33, 576, 4099};


}  // namespace

METALRT_OP_CASES(elementwise_cases) {
  std::vector<OpCase> cases;
  uint32_t seed = 600;
  for (DType dtype : kFloatDTypes)
    for (int64_t n : kWidths) {
      // add, mul and relu are correctly rounded on both sides: bit-identical.
      for (bool broadcast : {false, true}) {
        const Tensor a = MakeFloat({3, n}, dtype, RandomValuesOf(dtype, 3 * n, seed++, -4.0, 4.0));
        const Shape b_shape = broadcast ? Shape{n} : Shape{3, n};
        const Tensor b = MakeFloat(b_shape, dtype, RandomValuesOf(dtype, Numel(b_shape), seed++, -4.0, 4.0));
        const std::string variant = broadcast ? "broadcast" : "";
        cases.push_back(BitExact(SingleOutputCase(CaseName("add", dtype, {3, n}, variant), "add", gpu::KernelName("add", "", dtype),
                                         {a, b}, {{3, n}, dtype}, {},
                                         [](const Inputs& in, const Tensor& out) { ops::Add(in[0], in[1], out); })));
        cases.push_back(BitExact(SingleOutputCase(CaseName("mul", dtype, {3, n}, variant), "mul", gpu::KernelName("mul", "", dtype),
                                         {a, b}, {{3, n}, dtype}, {},
                                         [](const Inputs& in, const Tensor& out) { ops::Mul(in[0], in[1], out); })));
      }
      const Tensor x = MakeFloat({3, n}, dtype, RandomValuesOf(dtype, 3 * n, seed++, -6.0, 6.0));
      cases.push_back(BitExact(SingleOutputCase(CaseName("relu", dtype, {3, n}), "relu", gpu::KernelName("relu", "", dtype), {x},
                                       {{3, n}, dtype}, {},
                                       [](const Inputs& in, const Tensor& out) { ops::Relu(in[0], out); })));
      // exp in MSL and std::exp may differ by a few ulp; the quotient carries it.
      cases.push_back(SingleOutputCase(CaseName("gelu", dtype, {3, n}), "gelu", gpu::KernelName("gelu", "", dtype), {x},
                                       {{3, n}, dtype}, OracleBar(dtype, 1e-6, 1e-30),
                                       [](const Inputs& in, const Tensor& out) { ops::Gelu(in[0], out); }));
    }
  return cases;
}
