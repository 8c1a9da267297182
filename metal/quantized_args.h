// Arguments and tuning constants of the quantized-weight kernels
// (metal/quantized.metal), shared by the host dispatch (cpp/gpu/quantized.cpp) and MSL.
// Every kernel works on chunks of kQuantChunk consecutive values of one weight row:
// all formats have K divisible by 32, and a chunk never straddles a GGUF block,
// sub-block or affine group, so it shares one scale and one bias.
#ifndef METALRT_METAL_QUANTIZED_ARGS_H_
#define METALRT_METAL_QUANTIZED_ARGS_H_
#include "metal_constants.h"
#ifndef __METAL_VERSION__
#include <cstdint>
#endif

// The affine code width and the GEMVs' activation rows are not here: they are the
// function constants below.
struct QuantizedArgs {
  int64_t row_bytes;   // bytes of one row of data (GGUF blocks, or affine uint32 words)
  int32_t m;           // activation rows (matmul) or ids (embedding); weight rows for dequantize
  int32_t n;           // weight rows N
  int32_t k;           // weight columns K
  int32_t groups;      // affine scales per row (K / group_size); GGUF: unused
  int32_t group_size;  // affine values per scale; GGUF: unused
  int32_t splits;      // GEMVs: SIMD-groups sharing one row block's K (1 or 2; QuantGemvSplits)
  int32_t unused[2];   // keeps the struct a multiple of 8 bytes on both sides
};
static_assert(sizeof(QuantizedArgs) == 40, "QuantizedArgs must match between host and MSL");

// Function constants of the quantized kernels (quantized.metal, moe_matmul.metal), set
// per pipeline so that the loops over their private arrays have compile-time trip
// counts and unroll into registers (a run-time bound would leave the arrays in stack
// memory): the GEMVs' activation rows m (1..kQuantGemvMaxM: the rows of acc; the MoE
// GEMV's 1) and the MLX affine code width (2..8: the words of a wide chunk; 0 for the
// other formats, which never read it, so each of them keeps one pipeline).
METALRT_CONSTANT uint32_t kQuantGemvMConstant = 0;
METALRT_CONSTANT uint32_t kQuantAffineBitsConstant = 1;

// quantized_matmul_bt_concat: the rows of each weight (0 past the last), whose outputs
// are concatenated along N in this order (QuantizedArgs.n is their sum).
METALRT_CONSTANT int32_t kQuantConcatMaxParts = 3;
struct QuantizedConcatArgs {
  int32_t rows[4];   // kQuantConcatMaxParts used, padded to 16 bytes
};
static_assert(sizeof(QuantizedConcatArgs) == 16, "QuantizedConcatArgs must match between host and MSL");

METALRT_CONSTANT int32_t kQuantChunk = 8;
// The GEMVs' wide chunk (kernels <op>_gemv16_*): 16 values per lane and pass, which
// still share one scale and bias in every format (GGUF blocks and K-quant sub-blocks of
// 32, Q6_K's, Q3_K's and Q2_K's 16-value scales, affine groups of >= 32), their quants read as 2- or
// 4-byte words (quantized_blocks.h) and the scale decoded once per 16 values.
METALRT_CONSTANT int32_t kQuantWideChunk = 16;
METALRT_CONSTANT int32_t kQuantSimdWidth = 32;
// GEMV (m <= kQuantGemvMaxM): kQuantGemvRows weight rows per SIMD-group,
// kQuantGemvSimdgroups SIMD-groups per threadgroup; with K split (splits = 2) both
// SIMD-groups share one row block, each taking every other 256-value stretch of K.
METALRT_CONSTANT int32_t kQuantGemvMaxM = 8;
METALRT_CONSTANT int32_t kQuantGemvRows = 4;
METALRT_CONSTANT int32_t kQuantGemvSimdgroups = 2;
// K is split when each part keeps at least kQuantGemvSplitMinPartK values (2 chunks
// per lane) and the unsplit grid has fewer than kQuantGemvSplitMaxGroups threadgroups
// (too few to fill the GPU): down_proj (K = 1536, N = 576) splits, the K = 576
// projections do not.
METALRT_CONSTANT int32_t kQuantGemvSplitMinPartK = 2 * kQuantSimdWidth * kQuantChunk;
METALRT_CONSTANT int32_t kQuantGemvSplitMaxGroups = 256;
// GEMM (m > kQuantGemvMaxM): kQuantGemmTile x kQuantGemmTile outputs per threadgroup,
// K in steps of kQuantGemmTileK, four SIMD-groups in a 2x2 layout.
METALRT_CONSTANT int32_t kQuantGemmTile = 32;
METALRT_CONSTANT int32_t kQuantGemmTileK = 32;
METALRT_CONSTANT int32_t kQuantGemmThreads = 128;
// dequantize / quantized_embedding: threads per threadgroup along a row's chunks.
METALRT_CONSTANT int32_t kQuantGatherThreads = 64;

#ifndef __METAL_VERSION__
// SIMD-groups per row block of a quantized GEMV over `blocks` blocks of kQuantGemvRows
// rows with K values each (the rule above).
constexpr int32_t QuantGemvSplits(int64_t blocks, int64_t k) {
  return k >= kQuantGemvSimdgroups * kQuantGemvSplitMinPartK &&
                 (blocks + kQuantGemvSimdgroups - 1) / kQuantGemvSimdgroups < kQuantGemvSplitMaxGroups
             ? kQuantGemvSimdgroups
             : 1;
}

// Values per lane and pass of a quantized GEMV of K values split over `splits`
// SIMD-groups: kQuantWideChunk when K holds at least one wide pass (splits * 32 lanes *
// 16 values; the rest of K then goes in 8-value chunks, quantized_gemv.h) and the
// weight's data is aligned for the word loads; otherwise kQuantChunk (K < 512 unsplit:
// the wide chunks would leave lanes idle).
constexpr int32_t QuantGemvChunk(int64_t k, int32_t splits, bool data_aligned) {
  return data_aligned && k >= int64_t(splits) * kQuantSimdWidth * kQuantWideChunk ? kQuantWideChunk : kQuantChunk;
}
// Bytes of alignment the wide chunk's word loads need of the weight's data (the largest
// word: 4-byte loads of the formats whose blocks keep them aligned).
METALRT_CONSTANT int64_t kQuantWideDataAlign = 4;
#endif

#endif  // METALRT_METAL_QUANTIZED_ARGS_H_
