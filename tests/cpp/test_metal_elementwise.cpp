// Gates of the Metal elementwise kernels (metal/elementwise.metal): add, mul (same
// shape and the trailing-suffix broadcast), relu, gelu and silu_and_mul on the kMETAL
// device versus the CPU oracle on the same inputs, every float dtype, widths around the
// SIMD width and the 256-thread group, with proof that the native provider ran.
// Outputs are NaN-poisoned before each call.
#include <doctest/doctest.h>

#include "metal_op_testing.h"

using namespace metalrt;
using namespace metalrt::testing;

namespace {

const int64_t kWidths[] = {1, 31, 32, 33, 576, 4099};

// add, mul and relu are correctly rounded on both sides: bit-identical.
constexpr Bar kExact{0.0, 0.0};

}  // namespace

TEST_CASE("metal add and mul: same shape and broadcast suffix match the oracle exactly") {
  uint32_t seed = 600;
  for (DType dtype : kFloatDTypes)
    for (int64_t n : kWidths)
      for (bool broadcast : {false, true}) {
        CAPTURE(std::string(DTypeName(dtype)));
        CAPTURE(n);
        CAPTURE(broadcast);
        const Tensor a = MakeFloat({3, n}, dtype, RandomValuesOf(dtype, 3 * n, seed++, -4.0, 4.0));
        const Shape b_shape = broadcast ? Shape{n} : Shape{3, n};
        const Tensor b = MakeFloat(b_shape, dtype, RandomValuesOf(dtype, Numel(b_shape), seed++, -4.0, 4.0));
        CheckParity("add", "metal_add", "add", {a, b}, dtype, kExact,
                    [](const std::vector<Tensor>& in, const ops::OptTensor& out) {
                      return ops::Add(in[0], in[1], out);
                    });
        CheckParity("mul", "metal_mul", "mul", {a, b}, dtype, kExact,
                    [](const std::vector<Tensor>& in, const ops::OptTensor& out) {
                      return ops::Mul(in[0], in[1], out);
                    });
      }
}

TEST_CASE("metal relu, gelu and silu_and_mul match the oracle") {
  uint32_t seed = 700;
  for (DType dtype : kFloatDTypes)
    for (int64_t n : kWidths) {
      CAPTURE(std::string(DTypeName(dtype)));
      CAPTURE(n);
      const Tensor x = MakeFloat({3, n}, dtype, RandomValuesOf(dtype, 3 * n, seed++, -6.0, 6.0));
      const Tensor gate_up = MakeFloat({3, 2 * n}, dtype, RandomValuesOf(dtype, 6 * n, seed++, -6.0, 6.0));
      CheckParity("relu", "metal_relu", "relu", {x}, dtype, kExact,
                  [](const std::vector<Tensor>& in, const ops::OptTensor& out) { return ops::Relu(in[0], out); });
      // exp in MSL and std::exp may differ by a few ulp; the quotient carries it.
      CheckParity("gelu", "metal_gelu", "gelu", {x}, dtype, OracleBar(dtype, 1e-6, 1e-30),
                  [](const std::vector<Tensor>& in, const ops::OptTensor& out) { return ops::Gelu(in[0], out); });
      CheckParity("silu_and_mul", "metal_silu_and_mul", "silu_and_mul", {gate_up}, dtype,
                  OracleBar(dtype, 1e-6, 1e-30),
                  [](const std::vector<Tensor>& in, const ops::OptTensor& out) {
                    return ops::SiluAndMul(in[0], out);
                  });
    }
}
