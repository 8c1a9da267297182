// Arguments and tuning constants of the matmul and matmul_bt kernels
// (metal/matmul.metal), shared by the host dispatch (cpp/gpu/matmul.cpp) and MSL so grid
// math and kernel code cannot disagree. out[M,N] = a[M,K] . b with b [N,K] (matmul_bt,
// nn.Linear layout) or [K,N] (matmul), all row-major and contiguous.
#ifndef METALRT_METAL_MATMUL_ARGS_H_
#define METALRT_METAL_MATMUL_ARGS_H_
#include "metal_constants.h"
#ifndef __METAL_VERSION__
#include <cstdint>
#endif

struct MatmulArgs {
  int32_t m;
  int32_t n;
  int32_t k;
  int32_t splits;   // matmul_bt_gemv_splitk: SIMD-groups sharing one row block's K; else unused
};
static_assert(sizeof(MatmulArgs) == 16, "MatmulArgs must match between host and MSL");

METALRT_CONSTANT int32_t kMatmulSimdWidth = 32;

// matmul_bt GEMV (m <= kGemvMaxM, K % kGemvChunk == 0): kGemvSimdgroups SIMD-groups per
// threadgroup, each computing kGemvRows weight rows for all m activation rows; a lane
// reads kGemvChunk consecutive values per row and iteration (two 4-wide vector loads:
// 16 B of f16/bf16, 32 B of f32). With K split (matmul_bt_gemv_splitk), `splits`
// consecutive SIMD-groups share one row block, each taking every splits-th
// kMatmulSimdWidth * kGemvChunk stretch of K.
METALRT_CONSTANT int32_t kGemvSimdgroups = 4;
METALRT_CONSTANT int32_t kGemvRows = 4;
METALRT_CONSTANT int32_t kGemvChunk = 8;
METALRT_CONSTANT int32_t kGemvMaxM = 8;
// The K split doubles (1 -> 2 -> 4 SIMD-groups per row block) while each part keeps at
// least kGemvSplitMinPartK values of K (2 iterations per lane) and the grid is still
// below kGemvSplitMaxGroups threadgroups (a few per GPU core: below it the cores idle
// for want of rows, above it the split only adds the reduction).
METALRT_CONSTANT int32_t kGemvSplitMinPartK = 2 * kMatmulSimdWidth * kGemvChunk;
METALRT_CONSTANT int32_t kGemvSplitMaxGroups = 256;

// matmul's GEMV (b [K,N], m == 1; its K-vectors are strided, so scalar loads): one
// SIMD-group per output column, kGemvSimdgroups per threadgroup.

// GEMM (matmul_bt: m > kGemvMaxM or K % kGemvChunk != 0; matmul: m > 1): a threadgroup
// computes a kGemmTile x kGemmTile block of out with kGemmSimdgroups SIMD-groups in a
// 2x2 layout, each owning a 16x16 quarter (2x2 8x8 simdgroup matrices); K advances
// kGemmTileK at a time through threadgroup tiles.
METALRT_CONSTANT int32_t kGemmTile = 32;
METALRT_CONSTANT int32_t kGemmTileK = 32;
METALRT_CONSTANT int32_t kGemmSimdgroups = 4;
METALRT_CONSTANT int32_t kGemmThreads = kGemmSimdgroups * kMatmulSimdWidth;

#ifndef __METAL_VERSION__
// SIMD-groups per row block of the matmul_bt GEMV for an [N, K] weight (the rule above).
constexpr int32_t GemvSplits(int64_t n, int64_t k) {
  int32_t splits = 1;
  while (splits < kGemvSimdgroups && k >= 2 * splits * kGemvSplitMinPartK &&
         (n * splits + kGemvSimdgroups * kGemvRows - 1) / (kGemvSimdgroups * kGemvRows) < kGemvSplitMaxGroups)
    splits *= 2;
  return splits;
}
#endif

#endif  // METALRT_METAL_MATMUL_ARGS_H_
