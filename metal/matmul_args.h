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
  int32_t unused;   // keeps the struct a multiple of 8 bytes on both sides
};
static_assert(sizeof(MatmulArgs) == 16, "MatmulArgs must match between host and MSL");

// Decode GEMV (m == 1): one SIMD-group per output column n, kGemvSimdgroups per
// threadgroup.
METALRT_CONSTANT int32_t kMatmulSimdWidth = 32;
METALRT_CONSTANT int32_t kGemvSimdgroups = 4;

// GEMM (m > 1): a threadgroup computes a kGemmTile x kGemmTile block of out with
// kGemmSimdgroups SIMD-groups in a 2x2 layout, each owning a 16x16 quarter (2x2 8x8
// simdgroup matrices); K advances kGemmTileK at a time through threadgroup tiles.
METALRT_CONSTANT int32_t kGemmTile = 32;
METALRT_CONSTANT int32_t kGemmTileK = 32;
METALRT_CONSTANT int32_t kGemmSimdgroups = 4;
METALRT_CONSTANT int32_t kGemmThreads = kGemmSimdgroups * kMatmulSimdWidth;

#endif  // METALRT_METAL_MATMUL_ARGS_H_
