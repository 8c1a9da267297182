#include "ops/quantized_weight.h"

#include <string>

#include "ops/op_common.h"

namespace metalrt::ops::detail {

std::vector<Tensor> WeightInputs(const QuantizedTensor& w) {
  std::vector<Tensor> inputs{w.data};
  for (const Tensor* t : {&w.scales, &w.biases})
    if (t->defined()) inputs.push_back(*t);
  return inputs;
}

void CheckWeight(const QuantizedTensor& w, const char* op) {
  CheckDefined(w.data, op, "w.data");
  MakeQuantizedTensor(w.format, w.rows, w.cols, w.data, w.scales, w.biases, w.bits, w.group_size);
}

void CheckNoOverlapWeight(const Tensor& out, const QuantizedTensor& w, const char* op) {
  CheckNoOverlap(out, w.data, op, "w.data");
  if (w.scales.defined()) CheckNoOverlap(out, w.scales, op, "w.scales");
  if (w.biases.defined()) CheckNoOverlap(out, w.biases, op, "w.biases");
}

DeviceType CheckQuantizedProjection(const Tensor& x, const QuantizedTensor& w, const char* op) {
  CheckWeight(w, op);
  CheckRank(x, 2, op, "x");
  CheckFloat(x, op, "x");
  CheckContiguous(x, op, "x");
  if (x.dim(1) != w.cols)
    Fail(op, "x must have K=" + std::to_string(w.cols) + " columns to match w " + w.Describe() + ", got " +
         ShapeToString(x.shape()));
  return CommonDevice({&x, &w.data}, op);
}

}  // namespace metalrt::ops::detail
