// The bf16 prefill GEMM: C = A . W^T with A and W rounded to bf16 (round-to-nearest-
// even) and f32 products summed in f32, on AVX-512 BF16's vdpbf16ps, which multiplies
// and adds 32 bf16 pairs per instruction (twice the f32 FMA rate). The kernels are in
// gemm_bf16_avx512.cpp, compiled with its own target flags (fast.cmake) and called only
// when SelectedPrefillGemm() (prefill_gemm.h) is kBf16.
//
// Layout: W is `count` rows of k bf16 (a row's values side by side, so a pair of
// consecutive k is one 32-bit broadcast); A is packed once per call as blocks of
// kBf16RowBlock rows, each block k / 2 groups of 16 pairs (A[r][2p], A[r][2p + 1]),
// r the block's rows, so one 512-bit load holds pair p of 16 rows. That is also the
// layout of an AMX B tile (16 rows of 16 pairs), so gemm_bf16_amx.cpp multiplies the same
// packed A with the same bf16 rows.
#pragma once
#include <cstdint>

#include "metalrt/quantized.h"

namespace metalrt::cpu::fast {

inline constexpr int64_t kBf16RowBlock = 16;

// The row blocks of m rows (the last one zero-padded).
inline int64_t Bf16RowBlocks(int64_t m) { return (m + kBf16RowBlock - 1) / kBf16RowBlock; }

// The packed A's size in 32-bit words: m rounded up to whole blocks, times k / 2.
inline int64_t Bf16PackedSize(int64_t m, int64_t k) { return Bf16RowBlocks(m) * kBf16RowBlock * (k / 2); }

// Packs the row blocks [block_begin, block_end) of a[m, k] (f32, row-major, k even)
// into `packed` (Bf16PackedSize words); rows past m are zeros.
void PackRowsBf16Avx512(const float* a, int64_t m, int64_t k, int64_t block_begin, int64_t block_end,
                        uint32_t* packed);

// dst[i] = bf16(src[i]) for i < n, round-to-nearest-even (NaN stays NaN).
void RoundToBf16Avx512(const float* src, int64_t n, uint16_t* dst);

// True when DequantizeRowsBf16Avx512 decodes w's format (Q4_0, Q4_1, Q8_0).
bool DequantizesToBf16(const QuantizedTensor& w);

// dst[r * w.cols + k] = bf16(w[row0 + r, k]) for r < count, when DequantizesToBf16(w):
// each value in f32 with the oracle's operations (cpp/cpu/quantized_blocks.cpp: a
// product, then a sum, never fused), so it equals RoundToBf16Avx512 of DequantizeRow's.
void DequantizeRowsBf16Avx512(const QuantizedTensor& w, int64_t row0, int64_t count, uint16_t* dst);

// c[i * ldc + j] = sum_k a[i][k] w[j][k] for i < m, j < count, from the packed a and
// the bf16 rows w[count, k] (k even). With `accumulate` the sums start from c's values
// instead of 0: both kernels add the k terms one after another into one f32 accumulator
// per output, so a product over k split into consecutive parts (whole AMX steps for the
// AMX kernel), each accumulated onto the last, gives the one-call sums bit for bit.
void GemmBf16Avx512(const uint32_t* packed_a, int64_t m, int64_t k, const uint16_t* w, int64_t count,
                    float* c, int64_t ldc, bool accumulate = false);

// The same product on AMX tiles (TDPBF16PS: 16 x 16 f32 sums of 32-k bf16 dot products),
// for k a multiple of kAmxK; callable only where CpuHasAmxBf16() (cpu_features.h).
inline constexpr int64_t kAmxK = 32;
void GemmBf16Amx(const uint32_t* packed_a, int64_t m, int64_t k, const uint16_t* w, int64_t count, float* c,
                 int64_t ldc, bool accumulate = false);

using Bf16GemmFn = void (*)(const uint32_t* packed_a, int64_t m, int64_t k, const uint16_t* w, int64_t count,
                            float* c, int64_t ldc, bool accumulate);

// The kernel for a product over k under SelectedBf16Kernel() (prefill_gemm.h): AMX when
// it is selected and k is a multiple of kAmxK, else AVX-512 BF16. Throws what
// SelectedBf16Kernel throws, so it is asked on the op's thread, before its ParallelFor.
Bf16GemmFn SelectedBf16Gemm(int64_t k);

}  // namespace metalrt::cpu::fast
