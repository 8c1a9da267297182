// Embedding: row gather weight[ids[t]]. Id range is checked by the provider, which is
// where the ids are host-visible.
#include "ops/op_common.h"

namespace metalrt::ops {

Tensor Embedding(const Tensor& weight, const Tensor& ids, const OptTensor& out) {
  using namespace detail;
  constexpr const char* kOp = "embedding";
  CheckRank(weight, 2, kOp, "weight");
  CheckRank(ids, 1, kOp, "ids");
  CheckDType(ids, DType::kI32, kOp, "ids");
  CheckContiguous(weight, kOp, "weight");
  CheckContiguous(ids, kOp, "ids");
  const DeviceType device = CommonDevice({&weight, &ids}, kOp);
  Tensor result = OutputOrNew(out, {ids.dim(0), weight.dim(1)}, weight.dtype(), device, kOp);
  CheckNoOverlap(result, weight, kOp, "weight");
  CheckNoOverlap(result, ids, kOp, "ids");
  RunOp(kOp, device, OpCall{{weight, ids}, {result}, {}});
  return result;
}

}  // namespace metalrt::ops
