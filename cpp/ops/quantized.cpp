// Entry points of the quantized-weight ops: dequantize, quantized_matmul_bt and
// quantized_embedding. The weight was validated by MakeQuantizedTensor; here the other
// arguments are checked against it. Providers receive the weight as the call's params
// and its tensors as inputs after the activations / ids.
#include <string>

#include "ops/op_common.h"
#include "ops/quantized_weight.h"

namespace metalrt::ops {
namespace {

using namespace detail;

void CheckOutputDType(DType dtype, const char* op) {
  if (!IsFloating(dtype))
    FailType(op, std::string("dtype must be float32, float16 or bfloat16, got ") + DTypeName(dtype));
}

}  // namespace

Tensor Dequantize(const QuantizedTensor& w, DType dtype, const OptTensor& out) {
  constexpr const char* kOp = "dequantize";
  CheckWeight(w, kOp);
  CheckOutputDType(dtype, kOp);
  const DeviceType device = w.device();
  Tensor result = OutputOrNew(out, {w.rows, w.cols}, dtype, device, kOp);
  CheckNoOverlapWeight(result, w, kOp);
  RunOp(kOp, device, OpCall{WeightInputs(w), {result}, w});
  return result;
}

Tensor QuantizedMatmulBT(const Tensor& x, const QuantizedTensor& w, const OptTensor& out) {
  constexpr const char* kOp = "quantized_matmul_bt";
  const DeviceType device = CheckQuantizedProjection(x, w, kOp);
  Tensor result = OutputOrNew(out, {x.dim(0), w.rows}, x.dtype(), device, kOp);
  CheckNoOverlap(result, x, kOp, "x");
  CheckNoOverlapWeight(result, w, kOp);
  std::vector<Tensor> inputs{x};
  for (const Tensor& t : WeightInputs(w)) inputs.push_back(t);
  RunOp(kOp, device, OpCall{inputs, {result}, w});
  return result;
}

Tensor QuantizedEmbedding(const Tensor& ids, const QuantizedTensor& w, DType dtype, const OptTensor& out) {
  constexpr const char* kOp = "quantized_embedding";
  CheckWeight(w, kOp);
  CheckOutputDType(dtype, kOp);
  CheckRank(ids, 1, kOp, "ids");
  CheckDType(ids, DType::kI32, kOp, "ids");
  CheckContiguous(ids, kOp, "ids");
  const DeviceType device = CommonDevice({&ids, &w.data}, kOp);
  Tensor result = OutputOrNew(out, {ids.dim(0), w.cols}, dtype, device, kOp);
  CheckNoOverlap(result, ids, kOp, "ids");
  CheckNoOverlapWeight(result, w, kOp);
  CheckIndicesInRange(ids, ids.dim(0), 0, w.rows, kOp, [&](int64_t id, int64_t t) {
    return "id " + std::to_string(id) + " at position " + std::to_string(t) +
           " is outside the vocabulary of size " + std::to_string(w.rows);
  });
  std::vector<Tensor> inputs{ids};
  for (const Tensor& t : WeightInputs(w)) inputs.push_back(t);
  RunOp(kOp, device, OpCall{inputs, {result}, w});
  return result;
}

}  // namespace metalrt::ops
