// Entry points of matmul (A . B) and matmul_bt (A . B^T, B in nn.Linear layout).
#include "ops/op_common.h"

namespace metalrt::ops {
using namespace detail;
namespace {

// b_k_dim: the dim of b that is contracted with a's K (0 for matmul, 1 for matmul_bt).
Tensor Product(const char* op, const Tensor& a, const Tensor& b, int b_k_dim, const OptTensor& out) {
  CheckFloat(a, op, "a");
  CheckFloat(b, op, "b");
  CheckSameDType(a, b, op, "a", "b");
  const DeviceType device = CommonDevice({&a, &b, &OrUndefined(out)}, op);
  CheckRank(a, 2, op, "a");
  CheckRank(b, 2, op, "b");
  Check(a.dim(1) == b.dim(b_k_dim), op,
        "a " + ShapeToString(a.shape()) + " and b " + ShapeToString(b.shape()) +
            " disagree on K (dim 1 of a, dim " + std::to_string(b_k_dim) + " of b)");
  CheckContiguous(a, op, "a");
  CheckContiguous(b, op, "b");
  Tensor result = OutputOrNew(out, {a.dim(0), b.dim(1 - b_k_dim)}, a.dtype(), device, op);
  CheckNoOverlap(result, a, op, "a");
  CheckNoOverlap(result, b, op, "b");
  RunOp(op, device, OpCall{{a, b}, {result}, {}});
  return result;
}

}  // namespace

Tensor Matmul(const Tensor& a, const Tensor& b, const OptTensor& out) {
  return Product("matmul", a, b, 0, out);
}
Tensor MatmulBT(const Tensor& a, const Tensor& b, const OptTensor& out) {
  return Product("matmul_bt", a, b, 1, out);
}

}  // namespace metalrt::ops
