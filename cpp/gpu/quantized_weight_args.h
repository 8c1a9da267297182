// How a QuantizedTensor reaches the quantized kernels, shared by the dispatch of the
// quantized ops (quantized.cpp) and of moe_matmul_bt (moe.cpp): the format's token in
// kernel names, the QuantizedArgs of the weight and the kernels' function constants.
#pragma once
#include <cstdint>
#include <string>

#include "gpu/kernel_launch.h"
#include "metalrt/quantized.h"
#include "quantized_args.h"

namespace metalrt::gpu {

// "q4_1", ..., the affine format named with its scales' dtype ("affine_bf16").
inline std::string FormatToken(const QuantizedTensor& w) {
  if (w.format != QuantFormat::kAffine) return QuantFormatName(w.format);
  return std::string("affine_") + KernelDTypeSuffix(w.scales.dtype());
}

// The weight's arguments with m activation rows and n rows per launch (moe: per expert).
inline QuantizedArgs ArgsOf(const QuantizedTensor& w, int64_t m, int64_t n) {
  QuantizedArgs args{};
  args.row_bytes = static_cast<int64_t>(w.data.dim(1) * DTypeSize(w.data.dtype()));
  args.m = static_cast<int32_t>(m);
  args.n = static_cast<int32_t>(n);
  args.k = static_cast<int32_t>(w.cols);
  args.groups = HasScaleTensor(w.format) ? static_cast<int32_t>(w.cols / w.group_size) : 0;
  args.group_size = w.group_size;
  args.splits = 1;
  return args;
}
inline QuantizedArgs ArgsOf(const QuantizedTensor& w, int64_t m) { return ArgsOf(w, m, w.rows); }

// The code width of function constant kQuantAffineBitsConstant: w.bits for an affine
// weight, 0 for the other formats (they never read it: one pipeline each).
inline int32_t AffineBitsOf(const QuantizedTensor& w) { return w.format == QuantFormat::kAffine ? w.bits : 0; }

// The tensors a kernel binds as scales and biases: the weight's own where it has them,
// else data as a stand-in the kernel never reads.
inline const Tensor& ScalesOrStandIn(const QuantizedTensor& w) { return HasScaleTensor(w.format) ? w.scales : w.data; }
inline const Tensor& BiasesOrStandIn(const QuantizedTensor& w) { return w.biases.defined() ? w.biases : w.data; }

// The function constants of the quantized GEMM and row kernels: the affine code width
// (they do not read gemv_m, so a prefill's varying m compiles no pipelines).
inline FunctionConstants QuantizedConstants(int32_t affine_bits) {
  return {Constant(kQuantAffineBitsConstant, affine_bits)};
}

// A GEMV's: the code width and its m activation rows, kQuantGemvMConstant (a pipeline
// per m, so up to kQuantGemvMaxM per GEMV kernel and weight format).
inline FunctionConstants GemvConstants(int32_t affine_bits, int64_t m) {
  return {Constant(kQuantAffineBitsConstant, affine_bits), Constant(kQuantGemvMConstant, static_cast<int32_t>(m))};
}

// Whether a weight's data is aligned for the wide GEMV chunk's word loads.
inline bool WideChunkAligned(const Tensor& data) {
  return reinterpret_cast<uintptr_t>(data.data()) % kQuantWideDataAlign == 0;
}

// The GEMV variant of the kernel name for args (args.splits already chosen), by
// QuantGemvChunk: "gemv_" (8 values per lane and pass) or "gemv16_" (the kernels'
// template width W, so the profiler's kernel name records the choice).
inline std::string GemvVariant(const QuantizedArgs& args, bool data_aligned) {
  return QuantGemvChunk(args.k, args.splits, data_aligned) == kQuantWideChunk ? "gemv16_" : "gemv_";
}

}  // namespace metalrt::gpu
