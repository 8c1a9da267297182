// How a QuantizedTensor reaches the quantized kernels, shared by the dispatch of the
// quantized ops (quantized.cpp) and of moe_matmul_bt (moe.cpp): the format's token in
// kernel names and the QuantizedArgs of the weight.
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
  args.groups = w.format == QuantFormat::kAffine ? static_cast<int32_t>(w.cols / w.group_size) : 0;
  args.group_size = w.group_size;
  args.bits = w.bits;
  args.splits = 1;
  return args;
}
inline QuantizedArgs ArgsOf(const QuantizedTensor& w, int64_t m) { return ArgsOf(w, m, w.rows); }

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
