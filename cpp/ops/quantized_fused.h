// The unfused compositions of the fused quantized GEMVs (cpp/ops/quantized_fused.cpp):
// the CPU providers, and the Metal providers' path where no fused kernel applies.
#pragma once
#include "metalrt/op_registry.h"

namespace metalrt::ops::detail {

// quantized_matmul_bt then add (inputs: x, residual, weight tensors; param: the weight).
bool ComposeQuantizedMatmulBTAdd(const OpCall& call);
// quantized_matmul_bt then silu_and_mul (inputs: x, weight tensors; param: the weight).
bool ComposeQuantizedMatmulBTSwiglu(const OpCall& call);
// quantized_matmul_bt of each weight into its column slice (inputs: x, then every
// weight's tensors; param: std::vector<QuantizedTensor>).
bool ComposeQuantizedMatmulBTConcat(const OpCall& call);

}  // namespace metalrt::ops::detail
