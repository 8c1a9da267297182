// Entry point of softmax.
#include "ops/op_common.h"

namespace metalrt::ops {
using namespace detail;

Tensor Softmax(const Tensor& x, const OptTensor& out) {
  constexpr const char* op = "softmax";
  CheckFloat(x, op, "x");
  const DeviceType device = CommonDevice({&x, &OrUndefined(out)}, op);
  Check(x.ndim() >= 1, op, "x must have rank >= 1, got a scalar");
  CheckContiguous(x, op, "x");
  Tensor result = OutputOrNew(out, x.shape(), x.dtype(), device, op);
  CheckNoOverlap(result, x, op, "x");
  RunOp(op, device, OpCall{{x}, {result}, {}});
  return result;
}

}  // namespace metalrt::ops
