// Greedy argmax over the vocabulary of every logits row.
#include "ops/op_common.h"

namespace metalrt::ops {

Tensor GreedyArgmax(const Tensor& logits, const OptTensor& out) {
  using namespace detail;
  constexpr const char* kOp = "greedy_argmax";
  CheckRank(logits, 2, kOp, "logits");
  CheckFloat(logits, kOp, "logits");
  CheckContiguous(logits, kOp, "logits");
  Check(logits.dim(1) > 0, kOp, "logits must have a non-empty vocabulary, got shape " +
                                    ShapeToString(logits.shape()));
  Tensor result = OutputOrNew(out, {logits.dim(0)}, DType::kI32, logits.device(), kOp);
  CheckNoOverlap(result, logits, kOp, "logits");
  RunOp(kOp, logits.device(), OpCall{{logits}, {result}, {}});
  return result;
}

}  // namespace metalrt::ops
