// Entry point of rms_norm.
#include <cmath>

#include "ops/op_common.h"

namespace metalrt::ops {
using namespace detail;

Tensor RmsNorm(const Tensor& x, const Tensor& weight, float eps, const OptTensor& out) {
  constexpr const char* op = "rms_norm";
  CheckFloat(x, op, "x");
  const DeviceType device = CommonDevice({&x, &weight, &OrUndefined(out)}, op);
  Check(x.ndim() >= 1, op, "x must have rank >= 1, got a scalar");
  CheckContiguous(x, op, "x");
  CheckLastDimVector(weight, x, op, "weight");
  Check(std::isfinite(eps) && eps >= 0.0f, op, "eps must be finite and >= 0, got " + std::to_string(eps));
  Tensor result = OutputOrNew(out, x.shape(), x.dtype(), device, op);
  CheckNoOverlap(result, x, op, "x");
  CheckNoOverlap(result, weight, op, "weight");
  RunOp(op, device, OpCall{{x, weight}, {result}, NormParams{eps}});
  return result;
}

}  // namespace metalrt::ops
