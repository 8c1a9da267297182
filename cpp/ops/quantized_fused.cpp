// Entry points of the fused quantized GEMVs, quantized_matmul_bt_add,
// quantized_matmul_bt_swiglu and quantized_matmul_bt_concat, and their composition (the
// oracle, the CPU provider and the Metal path for m above the GEMV's). Providers receive
// the weight (concat: the vector of weights) as the call's params; inputs are x, then
// (add) the residual, then the weights' tensors.
#include "ops/quantized_fused.h"

#include <cstring>
#include <map>
#include <string>
#include <vector>

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
  if (w.rows % 2 != 0)
    Fail(kOp, "w must have an even number of rows (gate rows, then up rows), got " + w.Describe());
  Tensor result = OutputOrNew(out, {x.dim(0), w.rows / 2}, x.dtype(), device, kOp);
  CheckOutput(result, x, w, kOp);
  RunOp(kOp, device, OpCall{Inputs({x}, w), {result}, w});
  return result;
}

Tensor QuantizedMatmulBTConcat(const Tensor& x, const std::vector<QuantizedTensor>& weights,
                               const OptTensor& out) {
  constexpr const char* kOp = "quantized_matmul_bt_concat";
  if (!(weights.size() == 2 || weights.size() == 3))
    Fail(kOp, "expected 2 or 3 weights, got " + std::to_string(weights.size()));
  const QuantizedTensor& first = weights[0];
  const DeviceType device = CheckQuantizedProjection(x, first, kOp);
  std::vector<Tensor> inputs{x};
  int64_t rows = 0;
  for (const QuantizedTensor& w : weights) {
    CheckQuantizedProjection(x, w, kOp);
    // One kernel decodes every weight: same format, code width, group and scales dtype.
    const bool same = w.format == first.format && w.bits == first.bits && w.group_size == first.group_size &&
                      (!w.scales.defined() || w.scales.dtype() == first.scales.dtype());
    if (!same)
      Fail(kOp, "every weight must share the first's format, got " + first.Describe() + " and " +
           w.Describe());
    for (const Tensor& t : WeightInputs(w)) inputs.push_back(t);
    rows += w.rows;
  }
  Tensor result = OutputOrNew(out, {x.dim(0), rows}, x.dtype(), device, kOp);
  CheckNoOverlap(result, x, kOp, "x");
  for (const QuantizedTensor& w : weights) CheckNoOverlapWeight(result, w, kOp);
  RunOp(kOp, device, OpCall{inputs, {result}, weights});
  return result;
}

namespace {

// The rows of each device's quantized GEMV, registered by the backends.
std::map<DeviceType, int64_t>& GemvRows() {
  static std::map<DeviceType, int64_t> rows;
  return rows;
}

}  // namespace

QuantizedGemvRowsRegistrar::QuantizedGemvRowsRegistrar(DeviceType device, int64_t max_rows) {
  GemvRows()[device] = max_rows;
}

bool QuantizedConcatIsOneGemv(const Tensor& x) {
  const auto found = GemvRows().find(x.device());
  return x.ndim() == 2 && found != GemvRows().end() && x.dim(0) <= found->second;
}

namespace detail {

bool ComposeQuantizedMatmulBTConcat(const OpCall& call) {
  // Each product is gathered on the host and the rows interleaved there: the runtime has
  // no strided device copy. On the CPU the copies are M x N values beside the GEMVs'
  // M x N x K work; on Metal only batches past the GEMV's m come here (the provider's
  // decline), and the model projects those with three GEMMs instead.
  const Tensor& x = call.inputs[0];
  const Tensor& out = call.outputs[0];
  const size_t elem = DTypeSize(out.dtype());
  const int64_t m = x.dim(0), n = out.dim(1);
  std::vector<char> joined(static_cast<size_t>(m * n) * elem), part;
  int64_t column0 = 0;
  for (const QuantizedTensor& w : call.param<std::vector<QuantizedTensor>>()) {
    part.resize(static_cast<size_t>(m * w.rows) * elem);
    CopyToHost(QuantizedMatmulBT(x, w), part.data());
    for (int64_t i = 0; i < m; ++i)
      std::memcpy(joined.data() + (i * n + column0) * elem, part.data() + i * w.rows * elem, w.rows * elem);
    column0 += w.rows;
  }
  CopyFromHost(joined.data(), out);
  return true;
}

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
