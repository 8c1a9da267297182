// Entry points of silu_and_mul (SwiGLU on a merged gate|up projection) and of its
// swiglu_oai variant (metalrt/expert_ops.h): one op, the activation in its params.
#include <cmath>

#include "metalrt/expert_ops.h"
#include "ops/op_common.h"

namespace metalrt::ops {
using namespace detail;

namespace {

Tensor GatedUnit(const Tensor& x, const OptTensor& out, const GluParams& params) {
  constexpr const char* op = "silu_and_mul";
  CheckFloat(x, op, "x");
  const DeviceType device = CommonDevice({&x, &OrUndefined(out)}, op);
  Check(x.ndim() >= 1 && x.dim(-1) % 2 == 0, op,
        "x must have an even last dim [..., 2n], got " + ShapeToString(x.shape()));
  CheckContiguous(x, op, "x");
  Shape shape = x.shape();
  shape.back() /= 2;
  Tensor result = OutputOrNew(out, shape, x.dtype(), device, op);
  CheckNoOverlap(result, x, op, "x");
  RunOp(op, device, OpCall{{x}, {result}, params});
  return result;
}

}  // namespace

Tensor SiluAndMul(const Tensor& x, const OptTensor& out) {
  return GatedUnit(x, out, GluParams{GluActivation::kSilu, 0.0f, 0.0f});
}

Tensor SwigluOaiAndMul(const Tensor& x, float alpha, float limit, bool interleaved, const OptTensor& out) {
  for (auto [value, name] : {std::pair{alpha, "alpha"}, {limit, "limit"}})
    Check(std::isfinite(value) && value > 0.0f, "silu_and_mul",
          std::string("swiglu_oai ") + name + " must be finite and > 0, got " + std::to_string(value));
  const GluActivation activation = interleaved ? GluActivation::kSwigluOai : GluActivation::kSwigluOaiHalves;
  return GatedUnit(x, out, GluParams{activation, alpha, limit});
}

}  // namespace metalrt::ops
