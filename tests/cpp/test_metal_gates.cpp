// Gates of the Metal gate kernels (metal/gates.metal) in the op-case table against the
// CPU oracle (cpp/cpu/gates.cpp): gated_rms_norm at the GDN output's geometry (rows of
// Dv = 128, Qwen3-Next's T * 32 value heads) and around the SIMD width, in every float
// dtype; gated_query_split bit-exact (16 heads of 256, Qwen3-Next's full attention);
// sigmoid_mul.
#include <doctest/doctest.h>

#include <array>

#include "metal_op_testing.h"
#include "metalrt/ops.h"
#include "op_cases.h"

using namespace metalrt;
using namespace metalrt::testing;

METALRT_OP_CASES(gates_cases) {
  std::vector<OpCase> cases;
  uint32_t seed = 15800;
  for (DType dtype : kFloatDTypes) {
    for (const auto& shape : {Shape{1, 128}, Shape{3 * 32, 128}, Shape{5, 33}, Shape{2, 300}}) {
      const int64_t n = Numel(shape), d = shape[1];
      std::vector<Tensor> inputs{MakeFloat(shape, dtype, RandomValuesOf(dtype, n, seed++, -3.0, 3.0)),
                                 MakeFloat(shape, dtype, RandomValuesOf(dtype, n, seed++, -4.0, 4.0)),
                                 MakeFloat({d}, dtype, RandomValuesOf(dtype, d, seed++, -0.5, 1.5))};
      OpCase c = SingleOutputCase(CaseName("gated_rms_norm", dtype, shape), "gated_rms_norm",
                                  gpu::KernelName("gated_rms_norm", "row", dtype), inputs, {shape, dtype},
                                  OracleBar(dtype, 1e-5), [](const Inputs& in, const Tensor& out) {
                                    ops::GatedRmsNorm(in[0], in[1], in[2], 1e-6f, out);
                                  });
      // n and w * n are rounded to the dtype on both sides: a one-ulp difference in n
      // (the sum of squares is ordered differently) may carry through both roundings.
      c.bar.rel += 4 * UnitRoundoff(dtype);
      cases.push_back(c);
      cases.push_back(SingleOutputCase(CaseName("sigmoid_mul", dtype, shape), "sigmoid_mul",
                                       gpu::KernelName("sigmoid_mul", "", dtype), {inputs[0], inputs[1]},
                                       {shape, dtype}, OracleBar(dtype, 1e-6, 1e-7),
                                       [](const Inputs& in, const Tensor& out) { ops::SigmoidMul(in[0], in[1], out); }));
    }
    for (const auto& g : {std::array<int64_t, 3>{1, 16, 256}, {3, 2, 33}, {17, 4, 64}}) {
      const Shape shape{g[0], 2 * g[1] * g[2]};
      OpCase c;
      c.name = CaseName("gated_query_split", dtype, shape, "h" + std::to_string(g[1]));
      c.op = "gated_query_split";
      c.provider = "metal_gated_query_split";
      c.kernels = {gpu::KernelName("gated_query_split", "", dtype)};
      c.inputs = {MakeFloat(shape, dtype, RandomValuesOf(dtype, Numel(shape), seed++, -50.0, 50.0))};
      c.outputs = {{{g[0], g[1], g[2]}, dtype}, {{g[0], g[1] * g[2]}, dtype}};
      c.run = [g](const Inputs& in, const Outputs& out) {
        ops::GatedQuerySplit(in[0], g[1], g[2], out[0], out[1]);
        return Returned{};
      };
      cases.push_back(BitExact(c));
    }
  }
  return cases;
}
