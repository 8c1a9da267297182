// The CPU oracle's dequantization: one weight row to f32, one block (GGUF) or group
// (affine) at a time, with exactly the f32 operations of the references
// (gguf-py's gguf/quants.py dequantize_blocks for GGUF, w = scale * q + bias for MLX
// affine), so dequantize is bit-exact against them.
#pragma once
#include <cstdint>

#include "metalrt/quantized.h"

namespace metalrt::cpu {

// out[k] = w[row, k] for k < w.cols; w's tensors must be host-readable.
void DequantizeRow(const QuantizedTensor& w, int64_t row, float* out);

}  // namespace metalrt::cpu
