// Argument checks shared by the quantized-weight entry points (cpp/ops/quantized.cpp)
// and the fused quantized GEMVs (cpp/ops/quantized_fused.cpp).
#pragma once
#include <vector>

#include "metalrt/quantized.h"
#include "metalrt/tensor.h"

namespace metalrt::ops::detail {

// The weight's tensors in a call's inputs: {data} (GGUF) or {data, scales, biases}.
std::vector<Tensor> WeightInputs(const QuantizedTensor& w);
// A weight assembled by hand (not by MakeQuantizedTensor) is validated again, so a
// provider never sees an inconsistent one.
void CheckWeight(const QuantizedTensor& w, const char* op);
// The output may not overlap any of the weight's tensors.
void CheckNoOverlapWeight(const Tensor& out, const QuantizedTensor& w, const char* op);
// x [M, K] float, contiguous, K = w.cols, on w's device; returns that device.
DeviceType CheckQuantizedProjection(const Tensor& x, const QuantizedTensor& w, const char* op);

}  // namespace metalrt::ops::detail
