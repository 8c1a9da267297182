// matmul_bt: out[M,N] = a[M,K] . b[N,K]^T (b in nn.Linear layout), and matmul:
// out = a . b[K,N]; f32 accumulation. The algorithms are named by the kernel so the
// profiler shows which ran:
// * matmul_bt_gemv_<dtype> (decode and batches m <= 8, K % 8 == 0): a multi-vector
//   GEMV after MLX gemv / llama.cpp mul_mv (reference/metal-kernel-review.md 3.1): 4
//   SIMD-groups of 4 weight rows each; a lane loads 8 consecutive values of each row
//   (two 4-wide vector loads) and of each activation row, so each activation load
//   serves 4 weight rows and each weight load all m activation rows; simd_sum at the
//   end (body in matmul_gemv.h). Expected: bound by the weight bytes, as MLX's.
// * matmul_bt_gemv_splitk_<dtype>: the same GEMV with each row block's K split over 2
//   or 4 SIMD-groups and their sums added through threadgroup memory, for long rows
//   on a grid too small to fill the GPU (down_proj: K = 1536, N = 576); the host's
//   rule is GemvSplits in matmul_args.h.
// * matmul_gemv_<dtype> (matmul, m == 1): a SIMD-group per output column; the lanes
//   read a and b's strided K-vector of that column, then simd_sum combines them.
// * <op>_gemm_<dtype> (matmul_bt: m > 8 or K % 8 != 0; matmul: m > 1): 32x32 output
//   tiles; A and B tiles are staged in threadgroup memory as float (zero-filled past
//   the edges, so any M/N/K works; B as [column][k] whatever its layout) and
//   multiplied with 8x8 simdgroup_multiply_accumulate; the f32 result goes through
//   threadgroup memory once more so the store can convert and guard the edges.
#include <metal_stdlib>
#include "matmul_args.h"
#include "matmul_gemv.h"
using namespace metal;

// Element (column n, k) of b: b[n, k] for matmul_bt, b[k, n] for matmul.
template <bool kTransposed, typename T>
inline T b_at(device const T* b, int32_t n, int32_t k, constant MatmulArgs& args) {
  return kTransposed ? b[long(n) * args.k + k] : b[long(k) * args.n + n];
}

// matmul's GEMV (b [K,N]): SIMD-group per output column n.
template <typename T>
kernel void matmul_gemv(device const T* a [[buffer(0)]],
                        device const T* b [[buffer(1)]],
                        device T* out [[buffer(2)]],
                        constant MatmulArgs& args [[buffer(3)]],
                        uint group [[threadgroup_position_in_grid]],
                        uint simdgroup [[simdgroup_index_in_threadgroup]],
                        uint lane [[thread_index_in_simdgroup]]) {
  const int32_t n = int32_t(group) * kGemvSimdgroups + int32_t(simdgroup);
  if (n >= args.n) return;
  float acc = 0.0f;
  for (int32_t i = int32_t(lane); i < args.k; i += kMatmulSimdWidth) {
    acc += float(a[i]) * float(b_at<false>(b, n, i, args));
  }
  acc = simd_sum(acc);
  if (lane == 0) out[n] = T(acc);
}

// matmul_bt's multi-vector GEMV: SIMD-group s owns rows (group * kGemvSimdgroups + s) *
// kGemvRows.. for all m <= kGemvMaxM activation rows.
template <typename T>
kernel void matmul_bt_gemv(device const T* a [[buffer(0)]],
                           device const T* b [[buffer(1)]],
                           device T* out [[buffer(2)]],
                           constant MatmulArgs& args [[buffer(3)]],
                           uint group [[threadgroup_position_in_grid]],
                           uint simdgroup [[simdgroup_index_in_threadgroup]],
                           uint lane [[thread_index_in_simdgroup]]) {
  const int32_t row0 = (int32_t(group) * kGemvSimdgroups + int32_t(simdgroup)) * kGemvRows;
  if (row0 >= args.n) return;
  float acc[kGemvMaxM * kGemvRows];
  gemv_accumulate(a, b, args, row0, 0, 1, lane, acc);
  gemv_store(acc, out, args, row0, lane);
}

// The K-split GEMV: SIMD-groups s.. s + splits - 1 (s a multiple of args.splits) share
// the rows (group * (kGemvSimdgroups / splits) + s / splits) * kGemvRows.., part
// s % splits each; no early return, as every thread reaches the reduction's barrier.
template <typename T>
kernel void matmul_bt_gemv_splitk(device const T* a [[buffer(0)]],
                                  device const T* b [[buffer(1)]],
                                  device T* out [[buffer(2)]],
                                  constant MatmulArgs& args [[buffer(3)]],
                                  uint group [[threadgroup_position_in_grid]],
                                  uint simdgroup [[simdgroup_index_in_threadgroup]],
                                  uint lane [[thread_index_in_simdgroup]]) {
  threadgroup float partials[kGemvSimdgroups * kGemvMaxM * kGemvRows];
  const int32_t splits = args.splits, part = int32_t(simdgroup) % splits;
  const int32_t row0 = (int32_t(group) * (kGemvSimdgroups / splits) + int32_t(simdgroup) / splits) * kGemvRows;
  float acc[kGemvMaxM * kGemvRows];
  gemv_accumulate(a, b, args, row0, part, splits, lane, acc);
  gemv_reduce_parts<kGemvMaxM * kGemvRows>(acc, partials, args.m * kGemvRows, simdgroup, part, splits, lane);
  if (part == 0 && row0 < args.n) gemv_store(acc, out, args, row0, lane);
}

template <typename T, bool kTransposed>
kernel void matmul_gemm(device const T* a [[buffer(0)]],
                        device const T* b [[buffer(1)]],
                        device T* out [[buffer(2)]],
                        constant MatmulArgs& args [[buffer(3)]],
                        uint2 group [[threadgroup_position_in_grid]],
                        uint tid [[thread_index_in_threadgroup]],
                        uint simdgroup [[simdgroup_index_in_threadgroup]]) {
  threadgroup float a_tile[kGemmTile * kGemmTileK];   // [row][k]
  threadgroup float b_tile[kGemmTile * kGemmTileK];   // [column][k]
  threadgroup float c_tile[kGemmTile * kGemmTile];    // [row][column]
  const int32_t row0 = int32_t(group.y) * kGemmTile;
  const int32_t col0 = int32_t(group.x) * kGemmTile;
  // This SIMD-group's 16x16 quarter of the tile.
  const int32_t sg_row = int32_t(simdgroup / 2) * 16;
  const int32_t sg_col = int32_t(simdgroup % 2) * 16;

  simdgroup_matrix<float, 8, 8> acc[2][2];
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 2; ++j) acc[i][j] = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);

  for (int32_t k0 = 0; k0 < args.k; k0 += kGemmTileK) {
    for (int32_t e = int32_t(tid); e < kGemmTile * kGemmTileK; e += kGemmThreads) {
      const int32_t r = e / kGemmTileK, c = e % kGemmTileK, k = k0 + c;
      const bool k_in = k < args.k;
      a_tile[e] = (k_in && row0 + r < args.m) ? float(a[long(row0 + r) * args.k + k]) : 0.0f;
      b_tile[e] = (k_in && col0 + r < args.n) ? float(b_at<kTransposed>(b, col0 + r, k, args)) : 0.0f;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    for (int32_t kk = 0; kk < kGemmTileK; kk += 8) {
      simdgroup_matrix<float, 8, 8> ma[2], mb[2];
      for (int i = 0; i < 2; ++i)
        simdgroup_load(ma[i], a_tile, kGemmTileK, ulong2(kk, sg_row + 8 * i));
      // b_tile holds B^T rows; the transposed load yields the K x N operand. The
      // offset is in the pointer and the origin is 0: Apple's doc does not say in
      // which coordinates a transposed load reads a non-zero origin.
      for (int j = 0; j < 2; ++j)
        simdgroup_load(mb[j], b_tile + (sg_col + 8 * j) * kGemmTileK + kk, kGemmTileK, ulong2(0, 0), true);
      for (int i = 0; i < 2; ++i)
        for (int j = 0; j < 2; ++j) simdgroup_multiply_accumulate(acc[i][j], ma[i], mb[j], acc[i][j]);
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
  }

  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 2; ++j)
      simdgroup_store(acc[i][j], c_tile, kGemmTile, ulong2(sg_col + 8 * j, sg_row + 8 * i));
  threadgroup_barrier(mem_flags::mem_threadgroup);
  for (int32_t e = int32_t(tid); e < kGemmTile * kGemmTile; e += kGemmThreads) {
    const int32_t r = row0 + e / kGemmTile, c = col0 + e % kGemmTile;
    if (r < args.m && c < args.n) out[long(r) * args.n + c] = T(c_tile[e]);
  }
}

#define METALRT_MATMUL_SIGNATURE(T) device const T*, device const T*, device T*, constant MatmulArgs&

#define METALRT_MATMUL(T, SUFFIX)                                                                         \
  template [[host_name("matmul_bt_gemv_" #SUFFIX)]] kernel void matmul_bt_gemv<T>(                       \
      METALRT_MATMUL_SIGNATURE(T), uint, uint, uint);                                                     \
  template [[host_name("matmul_bt_gemv_splitk_" #SUFFIX)]] kernel void matmul_bt_gemv_splitk<T>(         \
      METALRT_MATMUL_SIGNATURE(T), uint, uint, uint);                                                     \
  template [[host_name("matmul_bt_gemm_" #SUFFIX)]] kernel void matmul_gemm<T, true>(                    \
      METALRT_MATMUL_SIGNATURE(T), uint2, uint, uint);                                                    \
  template [[host_name("matmul_gemv_" #SUFFIX)]] kernel void matmul_gemv<T>(METALRT_MATMUL_SIGNATURE(T), \
                                                                             uint, uint, uint);           \
  template [[host_name("matmul_gemm_" #SUFFIX)]] kernel void matmul_gemm<T, false>(                      \
      METALRT_MATMUL_SIGNATURE(T), uint2, uint, uint);

METALRT_MATMUL(float, f32)
METALRT_MATMUL(half, f16)
METALRT_MATMUL(bfloat, bf16)
