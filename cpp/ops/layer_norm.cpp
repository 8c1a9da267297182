// Entry point of layer_norm.
#include <cmath>

#include "ops/op_common.h"

namespace metalrt::ops {
using namespace detail;

Tensor LayerNorm(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps,
                 const OptTensor& out) {
  constexpr const char* op = "layer_norm";
  CheckFloat(x, op, "x");
  const DeviceType device = CommonDevice({&x, &weight, &bias, &OrUndefined(out)}, op);
  Check(x.ndim() >= 1, op, "x must have rank >= 1, got a scalar");
  CheckContiguous(x, op, "x");
  CheckLastDimVector(weight, x, op, "weight");
  if (bias.defined()) CheckLastDimVector(bias, x, op, "bias");
  Check(std::isfinite(eps) && eps >= 0.0f, op, "eps must be finite and >= 0, got " + std::to_string(eps));
  Tensor result = OutputOrNew(out, x.shape(), x.dtype(), device, op);
  CheckNoOverlap(result, x, op, "x");
  CheckNoOverlap(result, weight, op, "weight");
  CheckNoOverlap(result, bias, op, "bias");
  RunOp(op, device, OpCall{{x, weight, bias}, {result}, NormParams{eps}});
  return result;
}

}  // namespace metalrt::ops
