// Entry point of moe_bias_add (metalrt/expert_ops.h): the bias of each (token, slot)
// pair's expert added to its expert output.
#include <string>

#include "metalrt/expert_ops.h"
#include "ops/op_common.h"

namespace metalrt::ops {
using namespace detail;

Tensor MoeBiasAdd(const Tensor& y, const Tensor& bias, const Tensor& expert_ids, const OptTensor& out) {
  constexpr const char* op = "moe_bias_add";
  CheckRank(y, 3, op, "y");
  CheckFloat(y, op, "y");
  CheckContiguous(y, op, "y");
  const int64_t tokens = y.dim(0), slots = y.dim(1), n = y.dim(2);
  CheckRank(bias, 2, op, "bias");
  Check(bias.dim(1) == n && bias.dim(0) >= 1, op,
        "bias must be [E, " + std::to_string(n) + "] (E >= 1, y's last dim), got " + ShapeToString(bias.shape()));
  CheckSameDType(y, bias, op, "y", "bias");
  CheckContiguous(bias, op, "bias");
  CheckShape(expert_ids, {tokens, slots}, op, "expert_ids");
  CheckDType(expert_ids, DType::kI32, op, "expert_ids");
  CheckContiguous(expert_ids, op, "expert_ids");
  const DeviceType device = CommonDevice({&y, &bias, &expert_ids, &OrUndefined(out)}, op);
  Tensor result = OutputOrNew(out, y.shape(), y.dtype(), device, op);
  CheckNoOverlap(result, y, op, "y", /*may_alias=*/true);
  CheckNoOverlap(result, bias, op, "bias");
  CheckNoOverlap(result, expert_ids, op, "expert_ids");
  const int64_t experts = bias.dim(0);
  // As moe_matmul_bt: on Metal the ids are the router's output still being computed.
  if (device == DeviceType::kCPU)
    CheckIndicesInRange(expert_ids, expert_ids.numel(), 0, experts, op, [&](int64_t id, int64_t i) {
      return "expert id " + std::to_string(id) + " at [" + std::to_string(i / slots) + ", " +
             std::to_string(i % slots) + "] is outside [0, " + std::to_string(experts) + ")";
    });
  RunOp(op, device, OpCall{{y, bias, expert_ids}, {result}, {}});
  return result;
}

}  // namespace metalrt::ops
