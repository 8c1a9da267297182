// Entry points of the MoE ops: moe_router, moe_matmul_bt (float or quantized expert
// weights) and moe_combine. Math in metalrt/moe_ops.h. Providers of moe_matmul_bt get
// inputs {x, expert_ids, weight tensors...} (w, or the QuantizedTensor's data [, scales,
// biases]; then the up stack's the same way when gated) and MoeMatmulParams.
#include <string>
#include <vector>

#include "ops/op_common.h"
#include "ops/quantized_weight.h"

namespace metalrt::ops {
using namespace detail;

namespace {

// x, expert_ids and the output shared by both weight kinds; returns the output.
// stacks: 1, or 2 (gate and up: the output has 2N columns).
Tensor MoeMatmulCommon(const Tensor& x, const Tensor& expert_ids, int64_t num_experts, int64_t weight_rows,
                       int64_t weight_cols, const std::string& describe_w, int64_t stacks, DeviceType device,
                       const OptTensor& out, const char* op) {
  CheckFloat(x, op, "x");
  Check(x.ndim() == 2 || x.ndim() == 3, op,
        "x must be [T, K] or [T, k, K], got " + ShapeToString(x.shape()));
  CheckContiguous(x, op, "x");
  Check(num_experts >= 1 && weight_rows % num_experts == 0, op,
        "num_experts " + std::to_string(num_experts) + " must divide the " + std::to_string(weight_rows) +
            " rows of w " + describe_w + " (w is [E * N, K])");
  CheckRank(expert_ids, 2, op, "expert_ids");
  CheckDType(expert_ids, DType::kI32, op, "expert_ids");
  CheckContiguous(expert_ids, op, "expert_ids");
  const int64_t tokens = expert_ids.dim(0), slots = expert_ids.dim(1);
  Check(slots >= 1, op, "expert_ids must be [T, k] with k >= 1, got " + ShapeToString(expert_ids.shape()));
  Check(x.dim(0) == tokens && (x.ndim() == 2 || x.dim(1) == slots), op,
        "x must be [T, K] or [T, k, K] with T, k of expert_ids " + ShapeToString(expert_ids.shape()) +
            ", got " + ShapeToString(x.shape()));
  Check(x.dim(-1) == weight_cols, op,
        "x must have K=" + std::to_string(weight_cols) + " columns to match w " + describe_w + ", got " +
            ShapeToString(x.shape()));
  Tensor result = OutputOrNew(out, {tokens, slots, stacks * weight_rows / num_experts}, x.dtype(), device, op);
  CheckNoOverlap(result, x, op, "x");
  CheckNoOverlap(result, expert_ids, op, "expert_ids");
  // On Metal the ids are usually the router's output still being computed: reading them
  // here would cost a host wait, so the kernels guard instead (moe_ops.h).
  if (device == DeviceType::kCPU)
    CheckIndicesInRange(expert_ids, expert_ids.numel(), 0, num_experts, op, [&](int64_t id, int64_t i) {
      return "expert id " + std::to_string(id) + " at [" + std::to_string(i / slots) + ", " +
             std::to_string(i % slots) + "] is outside [0, " + std::to_string(num_experts) + ")";
    });
  return result;
}

}  // namespace

std::tuple<Tensor, Tensor> MoeRouter(const Tensor& logits, int64_t top_k, bool renormalize,
                                     const OptTensor& out_weights, const OptTensor& out_ids) {
  constexpr const char* kOp = "moe_router";
  CheckRank(logits, 2, kOp, "logits");
  CheckFloat(logits, kOp, "logits");
  CheckContiguous(logits, kOp, "logits");
  Check(top_k >= 1 && top_k <= logits.dim(1), kOp,
        "top_k must be in [1, E=" + std::to_string(logits.dim(1)) + "], got " + std::to_string(top_k));
  const DeviceType device = CommonDevice({&logits, &OrUndefined(out_weights), &OrUndefined(out_ids)}, kOp);
  Tensor weights = OutputOrNew(out_weights, {logits.dim(0), top_k}, DType::kF32, device, kOp);
  Tensor ids = OutputOrNew(out_ids, {logits.dim(0), top_k}, DType::kI32, device, kOp);
  CheckNoOverlap(weights, logits, kOp, "logits");
  CheckNoOverlap(ids, logits, kOp, "logits");
  CheckNoOverlap(ids, weights, kOp, "out_weights");
  RunOp(kOp, device, OpCall{{logits}, {weights, ids}, MoeRouterParams{top_k, renormalize}});
  return {weights, ids};
}

namespace {

Tensor FloatExperts(const Tensor& x, const Tensor& w, const Tensor* up, const Tensor& expert_ids,
                    int64_t num_experts, const OptTensor& out) {
  constexpr const char* kOp = "moe_matmul_bt";
  CheckRank(w, 2, kOp, "w");
  CheckFloat(w, kOp, "w");
  CheckContiguous(w, kOp, "w");
  CheckFloat(x, kOp, "x");
  CheckSameDType(x, w, kOp, "x", "w");
  std::vector<Tensor> inputs{x, expert_ids, w};
  if (up != nullptr) {
    CheckShape(*up, w.shape(), kOp, "up");
    CheckSameDType(w, *up, kOp, "w", "up");
    CheckContiguous(*up, kOp, "up");
    inputs.push_back(*up);
  }
  const DeviceType device =
      CommonDevice({&x, &w, up != nullptr ? up : &w, &expert_ids, &OrUndefined(out)}, kOp);
  Tensor result = MoeMatmulCommon(x, expert_ids, num_experts, w.dim(0), w.dim(1), ShapeToString(w.shape()),
                                  up != nullptr ? 2 : 1, device, out, kOp);
  for (size_t i = 2; i < inputs.size(); ++i) CheckNoOverlap(result, inputs[i], kOp, i == 2 ? "w" : "up");
  RunOp(kOp, device, OpCall{inputs, {result}, MoeMatmulParams{num_experts, false, {}, up != nullptr, {}}});
  return result;
}

Tensor QuantizedExperts(const Tensor& x, const QuantizedTensor& w, const QuantizedTensor* up,
                        const Tensor& expert_ids, int64_t num_experts, const OptTensor& out) {
  constexpr const char* kOp = "moe_matmul_bt";
  CheckWeight(w, kOp);
  std::vector<Tensor> inputs{x, expert_ids};
  for (const Tensor& t : WeightInputs(w)) inputs.push_back(t);
  if (up != nullptr) {
    CheckWeight(*up, kOp);
    Check(up->format == w.format && up->bits == w.bits && up->group_size == w.group_size &&
              up->rows == w.rows && up->cols == w.cols && up->data.dtype() == w.data.dtype() &&
              (!w.scales.defined() || up->scales.dtype() == w.scales.dtype()),
          kOp, "the up stack must match the gate stack " + w.Describe() + ", got " + up->Describe());
    for (const Tensor& t : WeightInputs(*up)) inputs.push_back(t);
  }
  const DeviceType device =
      CommonDevice({&x, &w.data, up != nullptr ? &up->data : &w.data, &expert_ids, &OrUndefined(out)}, kOp);
  Tensor result = MoeMatmulCommon(x, expert_ids, num_experts, w.rows, w.cols, w.Describe(),
                                  up != nullptr ? 2 : 1, device, out, kOp);
  CheckNoOverlapWeight(result, w, kOp);
  if (up != nullptr) CheckNoOverlapWeight(result, *up, kOp);
  RunOp(kOp, device,
        OpCall{inputs, {result}, MoeMatmulParams{num_experts, true, w, up != nullptr, up != nullptr ? *up : w}});
  return result;
}

}  // namespace

Tensor MoeMatmulBT(const Tensor& x, const Tensor& w, const Tensor& expert_ids, int64_t num_experts,
                   const OptTensor& out) {
  return FloatExperts(x, w, nullptr, expert_ids, num_experts, out);
}

Tensor MoeMatmulBT(const Tensor& x, const QuantizedTensor& w, const Tensor& expert_ids, int64_t num_experts,
                   const OptTensor& out) {
  return QuantizedExperts(x, w, nullptr, expert_ids, num_experts, out);
}

Tensor MoeMatmulBT(const Tensor& x, const Tensor& gate, const Tensor& up, const Tensor& expert_ids,
                   int64_t num_experts, const OptTensor& out) {
  return FloatExperts(x, gate, &up, expert_ids, num_experts, out);
}

Tensor MoeMatmulBT(const Tensor& x, const QuantizedTensor& gate, const QuantizedTensor& up,
                   const Tensor& expert_ids, int64_t num_experts, const OptTensor& out) {
  return QuantizedExperts(x, gate, &up, expert_ids, num_experts, out);
}

Tensor MoeCombine(const Tensor& y, const Tensor& weights, const Tensor& shared, const Tensor& shared_gate,
                  const OptTensor& out) {
  constexpr const char* kOp = "moe_combine";
  CheckRank(y, 3, kOp, "y");
  CheckFloat(y, kOp, "y");
  CheckContiguous(y, kOp, "y");
  const int64_t tokens = y.dim(0), slots = y.dim(1), n = y.dim(2);
  CheckShape(weights, {tokens, slots}, kOp, "weights");
  CheckDType(weights, DType::kF32, kOp, "weights");
  CheckContiguous(weights, kOp, "weights");
  Check(shared.defined() || !shared_gate.defined(), kOp, "shared_gate given without shared");
  if (shared.defined()) {
    CheckShape(shared, {tokens, n}, kOp, "shared");
    CheckSameDType(y, shared, kOp, "y", "shared");
    CheckContiguous(shared, kOp, "shared");
  }
  if (shared_gate.defined()) {
    CheckShape(shared_gate, {tokens, 1}, kOp, "shared_gate");
    CheckSameDType(y, shared_gate, kOp, "y", "shared_gate");
    CheckContiguous(shared_gate, kOp, "shared_gate");
  }
  const DeviceType device = CommonDevice({&y, &weights, &shared, &shared_gate, &OrUndefined(out)}, kOp);
  Tensor result = OutputOrNew(out, {tokens, n}, y.dtype(), device, kOp);
  for (auto [t, name] : {std::pair{&y, "y"}, {&weights, "weights"}, {&shared, "shared"},
                         {&shared_gate, "shared_gate"}})
    CheckNoOverlap(result, *t, kOp, name);
  RunOp(kOp, device, OpCall{{y, weights, shared, shared_gate}, {result}, {}});
  return result;
}

}  // namespace metalrt::ops
