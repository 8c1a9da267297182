// Entry points of the fused quantized GEMVs, quantized_matmul_bt_add and
// quantized_matmul_bt_swiglu, and their composition (the oracle, the CPU provider and
// the Metal path for m above the GEMV's). Providers receive the weight as the call's
// params; inputs are x, then (add) the residual, then the weight's tensors.
#include "ops/quantized_fused.h"

#include <string>

#include "ops/op_common.h"
#include "ops/quantized_weight.h"

namespace metalrt::ops {
namespace {

using namespace detail;

std::vector<Tensor> Inputs(std::initializer_list<Tensor> head, const QuantizedTensor& w) {
  std::vector<Tensor> inputs(head);
  for (const Tensor& t : WeightInputs(w)) inputs.push_back(t);
  return inputs;
}

void CheckOutput(const Tensor& result, const Tensor& x, const QuantizedTensor& w, const char* op) {
  CheckNoOverlap(result, x, op, "x");
  CheckNoOverlapWeight(result, w, op);
}

}  // namespace

Tensor QuantizedMatmulBTAdd(const Tensor& x, const QuantizedTensor& w, const Tensor& residual,
                            const OptTensor& out) {
  constexpr const char* kOp = "quantized_matmul_bt_add";
  const DeviceType device = CheckQuantizedProjection(x, w, kOp);
  CheckShape(residual, {x.dim(0), w.rows}, kOp, "residual");
  CheckSameDType(x, residual, kOp, "x", "residual");
  CheckContiguous(residual, kOp, "residual");
  CommonDevice({&x, &residual, &OrUndefined(out)}, kOp);
  Tensor result = OutputOrNew(out, {x.dim(0), w.rows}, x.dtype(), device, kOp);
  CheckOutput(result, x, w, kOp);
  CheckNoOverlap(result, residual, kOp, "residual", /*may_alias=*/true);
  RunOp(kOp, device, OpCall{Inputs({x, residual}, w), {result}, w});
  return result;
}

Tensor QuantizedMatmulBTSwiglu(const Tensor& x, const QuantizedTensor& w, const OptTensor& out) {
  constexpr const char* kOp = "quantized_matmul_bt_swiglu";
  const DeviceType device = CheckQuantizedProjection(x, w, kOp);
  Check(w.rows % 2 == 0, kOp,
        "w must have an even number of rows (gate rows, then up rows), got " + w.Describe());
  Tensor result = OutputOrNew(out, {x.dim(0), w.rows / 2}, x.dtype(), device, kOp);
  CheckOutput(result, x, w, kOp);
  RunOp(kOp, device, OpCall{Inputs({x}, w), {result}, w});
  return result;
}

namespace detail {

bool ComposeQuantizedMatmulBTAdd(const OpCall& call) {
  // residual + product (the same sum as product + residual): add's out may be its a,
  // and out is the residual in the in-place form.
  Add(call.inputs[1], QuantizedMatmulBT(call.inputs[0], call.param<QuantizedTensor>()), call.outputs[0]);
  return true;
}

bool ComposeQuantizedMatmulBTSwiglu(const OpCall& call) {
  SiluAndMul(QuantizedMatmulBT(call.inputs[0], call.param<QuantizedTensor>()), call.outputs[0]);
  return true;
}

}  // namespace detail
}  // namespace metalrt::ops
