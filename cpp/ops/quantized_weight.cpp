#include "ops/quantized_weight.h"

#include "ops/op_common.h"

namespace metalrt::ops::detail {

std::vector<Tensor> WeightInputs(const QuantizedTensor& w) {
  std::vector<Tensor> inputs{w.data};
  if (w.scales.defined()) inputs.insert(inputs.end(), {w.scales, w.biases});
  return inputs;
}

void CheckWeight(const QuantizedTensor& w, const char* op) {
  CheckDefined(w.data, op, "w.data");
  MakeQuantizedTensor(w.format, w.rows, w.cols, w.data, w.scales, w.biases, w.bits, w.group_size);
}

void CheckNoOverlapWeight(const Tensor& out, const QuantizedTensor& w, const char* op) {
  CheckNoOverlap(out, w.data, op, "w.data");
  if (w.scales.defined()) {
    CheckNoOverlap(out, w.scales, op, "w.scales");
    CheckNoOverlap(out, w.biases, op, "w.biases");
  }
}

}  // namespace metalrt::ops::detail
