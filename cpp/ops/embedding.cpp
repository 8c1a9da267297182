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
  // Every id is checked before anything runs, so a bad call leaves `out` untouched.
  if (ReadableOnHost(ids)) {
    const int32_t* id = ids.data_as<int32_t>();
    for (int64_t t = 0; t < ids.dim(0); ++t)
      Check(id[t] >= 0 && id[t] < weight.dim(0), kOp,
            "id " + std::to_string(id[t]) + " at position " + std::to_string(t) +
                " is outside the vocabulary of size " + std::to_string(weight.dim(0)));
  }
  RunOp(kOp, device, OpCall{{weight, ids}, {result}, {}});
  return result;
}

}  // namespace metalrt::ops
