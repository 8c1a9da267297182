// Entry point of silu_and_mul (SwiGLU on a merged gate|up projection).
#include "ops/op_common.h"

namespace metalrt::ops {
using namespace detail;

Tensor SiluAndMul(const Tensor& x, const OptTensor& out) {
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
  RunOp(op, device, OpCall{{x}, {result}, {}});
  return result;
}

}  // namespace metalrt::ops
