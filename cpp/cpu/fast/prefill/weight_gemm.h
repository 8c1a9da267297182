// The prefill GEMMs of the matmul ops for m above the GEMV's rows, over TiledGemm: each
// takes the f32 GEMM of the panels (the BLAS sgemm, prefill/blas/gemm.cpp) or null for
// the bf16 GEMM (prefill/matmul_bf16.cpp), and returns false where it declines (m within
// the GEMV's rows; for the bf16 GEMM, where Bf16GemmServes does not). f16/bf16 operands
// are converted to f32 (A once, B a panel at a time) and the result is rounded to the
// dtype once, as the oracle does (cpp/cpu/matmul.cpp, cpp/cpu/quantized_matmul.cpp).
#pragma once
#include "cpu/fast/prefill/tiled_gemm.h"
#include "metalrt/op_registry.h"

namespace metalrt::cpu::fast {

// matmul: A[M, K] . B[K, N].
bool MatmulGemm(const OpCall& call, F32Gemm f32_gemm);

// matmul_bt: A[M, K] . B[N, K]^T.
bool MatmulBtGemm(const OpCall& call, F32Gemm f32_gemm);

// quantized_matmul_bt: x[M, K] . W[N, K]^T. Each panel of weight rows is dequantized
// into f32 scratch by the oracle's block decoders (DequantizeRow: every format,
// bit-exact with the references); for the bf16 GEMM, Q4_0/Q4_1/Q8_0 rows decode
// straight to bf16 (the same values, rounded once: gemm_bf16.h) and the other formats
// are rounded from the f32 panel. The dequantization is paid once per call and reused by
// all m rows; the weight stays quantized in memory, only a panel (<= 128 rows) decoded.
bool QuantizedMatmulBtGemm(const OpCall& call, F32Gemm f32_gemm);

}  // namespace metalrt::cpu::fast
