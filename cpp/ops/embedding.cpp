// Embedding: row gather weight[ids[t]]. Ids are range-checked here wherever the host
// can read them (ReadableOnHost); an id outside [0, V) that reaches a provider anyway
// gives a zero row.
#include <string>

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
  CheckIndicesInRange(ids, ids.dim(0), 0, weight.dim(0), kOp, [&](int64_t id, int64_t t) {
    return "id " + std::to_string(id) + " at position " + std::to_string(t) +
           " is outside the vocabulary of size " + std::to_string(weight.dim(0));
  });
  RunOp(kOp, device, OpCall{{weight, ids}, {result}, {}});
  return result;
}

}  // namespace metalrt::ops
