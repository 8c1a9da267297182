// Checks of a QuantizedTensor argument shared by the entry points that take one
// (quantized.cpp, quantized_fused.cpp, moe.cpp). Providers receive the weight's tensors as inputs.
#pragma once
#include <vector>

#include "metalrt/quantized.h"
#include "metalrt/tensor.h"

namespace metalrt::ops::detail {

// {data} (GGUF) or {data, scales, biases} (affine).
std::vector<Tensor> WeightInputs(const QuantizedTensor& w);
// A weight assembled by hand (not by MakeQuantizedTensor) is validated again, so a
// provider never sees an inconsistent one.
void CheckWeight(const QuantizedTensor& w, const char* op);
// The output may not overlap any of the weight's tensors.
void CheckNoOverlapWeight(const Tensor& out, const QuantizedTensor& w, const char* op);
// x [M, K] float, contiguous, K = w.cols, on w's device; returns that device.
DeviceType CheckQuantizedProjection(const Tensor& x, const QuantizedTensor& w, const char* op);

}  // namespace metalrt::ops::detail
