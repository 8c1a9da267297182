// Entry points of the elementwise ops: add and mul (b broadcast as a trailing suffix
// of a's shape), relu and gelu.
#include "ops/op_common.h"

namespace metalrt::ops {
using namespace detail;
namespace {

Tensor Binary(const char* op, const Tensor& a, const Tensor& b, const OptTensor& out) {
  CheckFloat(a, op, "a");
  CheckFloat(b, op, "b");
  CheckSameDType(a, b, op, "a", "b");
  const DeviceType device = CommonDevice({&a, &b, &OrUndefined(out)}, op);
  const Shape& as = a.shape();
  const Shape& bs = b.shape();
  const bool suffix = bs.size() <= as.size() && std::equal(bs.begin(), bs.end(), as.end() - bs.size());
  Check(suffix, op,
        "b must have the shape of a " + ShapeToString(as) + " or a trailing suffix of it, got " +
            ShapeToString(bs));
  CheckContiguous(a, op, "a");
  CheckContiguous(b, op, "b");
  Tensor result = OutputOrNew(out, as, a.dtype(), device, op);
  CheckNoOverlap(result, a, op, "a", /*may_alias=*/true);
  CheckNoOverlap(result, b, op, "b");
  RunOp(op, device, OpCall{{a, b}, {result}, {}});
  return result;
}

Tensor Unary(const char* op, const Tensor& x, const OptTensor& out) {
  CheckFloat(x, op, "x");
  const DeviceType device = CommonDevice({&x, &OrUndefined(out)}, op);
  CheckContiguous(x, op, "x");
  Tensor result = OutputOrNew(out, x.shape(), x.dtype(), device, op);
  CheckNoOverlap(result, x, op, "x");
  RunOp(op, device, OpCall{{x}, {result}, {}});
  return result;
}

}  // namespace

Tensor Add(const Tensor& a, const Tensor& b, const OptTensor& out) { return Binary("add", a, b, out); }
Tensor Mul(const Tensor& a, const Tensor& b, const OptTensor& out) { return Binary("mul", a, b, out); }
Tensor Relu(const Tensor& x, const OptTensor& out) { return Unary("relu", x, out); }
Tensor Gelu(const Tensor& x, const OptTensor& out) { return Unary("gelu", x, out); }

}  // namespace metalrt::ops
