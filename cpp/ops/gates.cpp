// Entry points of the gate ops of the hybrid attention layers: gated_rms_norm (the
// Gated-DeltaNet output norm), gated_query_split and sigmoid_mul (the full-attention
// layers' output gate). Math in metalrt/moe_ops.h.
#include <cmath>
#include <string>

#include "ops/op_common.h"

namespace metalrt::ops {
using namespace detail;

Tensor GatedRmsNorm(const Tensor& x, const Tensor& z, const Tensor& weight, float eps, const OptTensor& out) {
  constexpr const char* kOp = "gated_rms_norm";
  CheckFloat(x, kOp, "x");
  const DeviceType device = CommonDevice({&x, &z, &weight, &OrUndefined(out)}, kOp);
  Check(x.ndim() >= 1, kOp, "x must have rank >= 1, got a scalar");
  CheckContiguous(x, kOp, "x");
  CheckShape(z, x.shape(), kOp, "z");
  CheckSameDType(x, z, kOp, "x", "z");
  CheckContiguous(z, kOp, "z");
  CheckLastDimVector(weight, x, kOp, "weight");
  Check(std::isfinite(eps) && eps >= 0.0f, kOp, "eps must be finite and >= 0, got " + std::to_string(eps));
  Tensor result = OutputOrNew(out, x.shape(), x.dtype(), device, kOp);
  CheckNoOverlap(result, x, kOp, "x");
  CheckNoOverlap(result, z, kOp, "z");
  CheckNoOverlap(result, weight, kOp, "weight");
  RunOp(kOp, device, OpCall{{x, z, weight}, {result}, GatedRmsNormParams{eps}});
  return result;
}

std::tuple<Tensor, Tensor> GatedQuerySplit(const Tensor& q_gate, int64_t num_heads, int64_t head_dim,
                                           const OptTensor& out_q, const OptTensor& out_gate) {
  constexpr const char* kOp = "gated_query_split";
  CheckRank(q_gate, 2, kOp, "q_gate");
  CheckFloat(q_gate, kOp, "q_gate");
  CheckContiguous(q_gate, kOp, "q_gate");
  Check(num_heads >= 1 && head_dim >= 1, kOp,
        "num_heads and head_dim must be >= 1, got " + std::to_string(num_heads) + " and " +
            std::to_string(head_dim));
  Check(q_gate.dim(1) == 2 * num_heads * head_dim, kOp,
        "q_gate must have num_heads * 2 * head_dim = " + std::to_string(2 * num_heads * head_dim) +
            " columns (per head head_dim query values then head_dim gate values), got " +
            ShapeToString(q_gate.shape()));
  const DeviceType device = CommonDevice({&q_gate, &OrUndefined(out_q), &OrUndefined(out_gate)}, kOp);
  const int64_t tokens = q_gate.dim(0);
  Tensor q = OutputOrNew(out_q, {tokens, num_heads, head_dim}, q_gate.dtype(), device, kOp);
  Tensor gate = OutputOrNew(out_gate, {tokens, num_heads * head_dim}, q_gate.dtype(), device, kOp);
  CheckNoOverlap(q, q_gate, kOp, "q_gate");
  CheckNoOverlap(gate, q_gate, kOp, "q_gate");
  CheckNoOverlap(gate, q, kOp, "out_q");
  RunOp(kOp, device, OpCall{{q_gate}, {q, gate}, GatedQuerySplitParams{num_heads, head_dim}});
  return {q, gate};
}

Tensor SigmoidMul(const Tensor& x, const Tensor& gate, const OptTensor& out) {
  constexpr const char* kOp = "sigmoid_mul";
  CheckFloat(x, kOp, "x");
  const DeviceType device = CommonDevice({&x, &gate, &OrUndefined(out)}, kOp);
  CheckContiguous(x, kOp, "x");
  CheckShape(gate, x.shape(), kOp, "gate");
  CheckSameDType(x, gate, kOp, "x", "gate");
  CheckContiguous(gate, kOp, "gate");
  Tensor result = OutputOrNew(out, x.shape(), x.dtype(), device, kOp);
  CheckNoOverlap(result, x, kOp, "x", /*may_alias=*/true);
  CheckNoOverlap(result, gate, kOp, "gate");
  RunOp(kOp, device, OpCall{{x, gate}, {result}, {}});
  return result;
}

}  // namespace metalrt::ops
