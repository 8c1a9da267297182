// Which fast CPU provider serves a matmul by its row count m (the activation rows):
// decode-sized products (m <= kGemvMaxRows) go to the quantized GEMV of cpp/cpu/fast
// (one int8 activation quantization, integer block dots, weights streamed once per
// call); larger m (prefill) goes to the BLAS-backed GEMM, which dequantizes weight
// tiles and reuses them across rows. The two providers read this one constant so
// that between them every m has exactly one fast owner; under decode rows
// (DecodeRows, op_registry.h) the GEMV owns every m.
#pragma once
#include <cstdint>

namespace metalrt::cpu::fast {

// Up to this many rows the GEMV streams the weights once for all rows (kept in
// registers per block); past it a GEMM's tile reuse wins.
inline constexpr int64_t kGemvMaxRows = 16;

}  // namespace metalrt::cpu::fast
