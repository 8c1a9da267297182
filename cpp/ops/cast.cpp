// Entry point of cast (any dtype to any dtype).
#include "ops/op_common.h"

namespace metalrt::ops {
using namespace detail;

Tensor Cast(const Tensor& x, DType dtype, const OptTensor& out) {
  constexpr const char* op = "cast";
  CheckDefined(x, op, "x");
  const DeviceType device = CommonDevice({&x, &OrUndefined(out)}, op);
  CheckContiguous(x, op, "x");
  Tensor result = OutputOrNew(out, x.shape(), dtype, device, op);
  CheckNoOverlap(result, x, op, "x");
  RunOp(op, device, OpCall{{x}, {result}, dtype});
  return result;
}

}  // namespace metalrt::ops
