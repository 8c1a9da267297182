// Op cases of the Metal silu_and_mul kernel (metal/silu_and_mul.metal) for the op-case
// table (test_op_cases.cpp): every float dtype, widths around the SIMD width and the
// 256-thread group.
#include "metal_op_testing.h"
#include "op_cases.h"

using namespace metalrt;
using namespace metalrt::testing;

METALRT_OP_CASES(silu_and_mul_cases) {
  std::vector<OpCase> cases;
  uint32_t seed = 700;
  for (DType dtype : kFloatDTypes)
    for (int64_t n : {1, 31, 32, 33, 576, 4099}) {
      const Tensor gate_up = MakeFloat({3, 2 * n}, dtype, RandomValuesOf(dtype, 6 * n, seed++, -6.0, 6.0));
      // exp in MSL and std::exp may differ by a few ulp; the quotient carries it.
      cases.push_back(SingleOutputCase(CaseName("silu_and_mul", dtype, {3, 2 * n}), "silu_and_mul",
                                       gpu::KernelName("silu_and_mul", "", dtype), {gate_up}, {{3, n}, dtype},
                                       OracleBar(dtype, 1e-6, 1e-30),
                                       [](const Inputs& in, const Tensor& out) { ops::SiluAndMul(in[0], out); }));
    }
  return cases;
}
