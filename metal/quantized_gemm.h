// The quantized GEMM tile (design: metal/quantized.metal's header), shared by
// quantized_matmul_bt_gemm (rows of x and out in order) and moe_matmul_bt_gemm (the
// (token, slot) pairs of one expert, gathered): one 32 x 32 output tile,
// out[out_row(i) * n + c] = x[x_row(i)] . w[row_base + c] for the tile's rows i from
// row0 and columns c from col0. `Rows` maps a tile row to its x / out row (-1: past
// the end: zero-filled, not written).
#ifndef METALRT_METAL_QUANTIZED_GEMM_H_
#define METALRT_METAL_QUANTIZED_GEMM_H_
#include <metal_stdlib>
#include "quantized_blocks.h"
using namespace metal;

// Rows 0 .. m-1 of x and out (quantized_matmul_bt).
struct QuantGemmDenseRows {
  int32_t m;
  long x_row(int32_t i) const { return i < m ? long(i) : -1; }
  long out_row(int32_t i) const { return i < m ? long(i) : -1; }
};

// x_tile, w_tile: kQuantGemmTile * kQuantGemmTileK floats; c_tile: kQuantGemmTile^2.
template <typename F, typename T, typename S, typename Rows>
inline void quantized_gemm_tile(device const T* x, thread const Rows& rows, int32_t row0, device const uchar* data,
                                device const S* scales, device const S* biases, long row_base, int32_t col0,
                                device T* out, constant QuantizedArgs& args, uint tid, uint simdgroup,
                                threadgroup float* x_tile, threadgroup float* w_tile, threadgroup float* c_tile) {
  const int32_t sg_row = int32_t(simdgroup / 2) * 16;
  const int32_t sg_col = int32_t(simdgroup % 2) * 16;
  simdgroup_matrix<float, 8, 8> acc[2][2];
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 2; ++j) acc[i][j] = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);

  // K is a multiple of 32 in every format, so only the M and N edges need guards.
  for (int32_t k0 = 0; k0 < args.k; k0 += kQuantGemmTileK) {
    for (int32_t e = int32_t(tid); e < kQuantGemmTile * kQuantGemmTileK; e += kQuantGemmThreads) {
      const int32_t r = e / kQuantGemmTileK, c = e % kQuantGemmTileK;
      const long row = rows.x_row(row0 + r);
      x_tile[e] = row >= 0 ? float(x[row * args.k + k0 + c]) : 0.0f;
    }
    {
      // One chunk per thread: 32 weight rows x 4 chunks of 8.
      const int32_t r = int32_t(tid) / 4, c0 = (int32_t(tid) % 4) * kQuantChunk;
      threadgroup float* dst = w_tile + r * kQuantGemmTileK + c0;
      if (col0 + r < args.n) {
        const QuantChunk q = load_chunk<F>(data, scales, biases, row_base + col0 + r, k0 + c0, args);
        for (int j = 0; j < 8; ++j) dst[j] = chunk_value<F>(q, j);
      } else {
        for (int j = 0; j < 8; ++j) dst[j] = 0.0f;
      }
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    for (int32_t kk = 0; kk < kQuantGemmTileK; kk += 8) {
      simdgroup_matrix<float, 8, 8> ma[2], mb[2];
      for (int i = 0; i < 2; ++i) simdgroup_load(ma[i], x_tile, kQuantGemmTileK, ulong2(kk, sg_row + 8 * i));
      // The offset is in the pointer and the origin is 0: Apple's doc does not say in
      // which coordinates a transposed load reads a non-zero origin.
      for (int j = 0; j < 2; ++j)
        simdgroup_load(mb[j], w_tile + (sg_col + 8 * j) * kQuantGemmTileK + kk, kQuantGemmTileK,
                       ulong2(0, 0), true);
      for (int i = 0; i < 2; ++i)
        for (int j = 0; j < 2; ++j) simdgroup_multiply_accumulate(acc[i][j], ma[i], mb[j], acc[i][j]);
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
  }
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 2; ++j)
      simdgroup_store(acc[i][j], c_tile, kQuantGemmTile, ulong2(sg_col + 8 * j, sg_row + 8 * i));
  threadgroup_barrier(mem_flags::mem_threadgroup);
  for (int32_t e = int32_t(tid); e < kQuantGemmTile * kQuantGemmTile; e += kQuantGemmThreads) {
    const long row = rows.out_row(row0 + e / kQuantGemmTile);
    const int32_t c = col0 + e % kQuantGemmTile;
    if (row >= 0 && c < args.n) out[row * args.n + c] = T(c_tile[e]);
  }
}

#endif  // METALRT_METAL_QUANTIZED_GEMM_H_
