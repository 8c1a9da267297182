// The quantized GEMV body (design: metal/quantized.metal's header), shared by
// quantized_matmul_bt_gemv (the whole weight), its fused-epilogue variants
// (quantized_matmul_bt_add_gemv, quantized_matmul_bt_swiglu_gemv), the concatenated
// GEMV and moe_matmul_bt_gemv (one expert's rows).
#ifndef METALRT_METAL_QUANTIZED_GEMV_H_
#define METALRT_METAL_QUANTIZED_GEMV_H_
#include <metal_stdlib>
#include "gemv_split.h"
#include "quantized_blocks.h"
using namespace metal;

// The activation rows m of every GEMV pipeline (1..kQuantGemvMaxM; the MoE GEMV's 1):
// the loops over acc's rows run to it, so they unroll and acc stays in registers.
static_assert(kQuantGemvMConstant == 0, "gemv_m is function constant 0");
constant int gemv_m [[function_constant(0)]];

// Floats of threadgroup memory the K split's partial sums take, for R rows per
// SIMD-group (each kernel declares them: MSL allows threadgroup arrays only there).
constexpr int quant_gemv_partials(int rows) { return kQuantGemvSimdgroups * kQuantGemvMaxM * rows; }

// Where a SIMD-group works: the first of its kQuantGemvRows rows (blocks numbered over
// the grid, args.splits SIMD-groups per block) and its part of K.
struct QuantGemvPlace {
  int32_t row0;
  int32_t part;
};
inline QuantGemvPlace gemv_place(uint group, uint simdgroup, constant QuantizedArgs& args) {
  const int32_t splits = args.splits;
  return {(int32_t(group) * (kQuantGemvSimdgroups / splits) + int32_t(simdgroup) / splits) * kQuantGemvRows,
          int32_t(simdgroup) % splits};
}

// Adds the W values k0 .. k0 + W - 1 of each weight row and of the gemv_m activation
// rows to acc.
template <typename F, typename T, typename S, int R, int W>
inline void gemv_chunk(device const T* x, device const uchar* data, device const S* scales,
                       device const S* biases, constant QuantizedArgs& args, thread const long* rows,
                       thread float* acc, int32_t k0) {
  QuantChunkW<W> w[R];
  for (int r = 0; r < R; ++r)
    if (rows[r] >= 0) w[r] = load_chunk<F, S, W>(data, scales, biases, rows[r], k0, args);
  for (int32_t i = 0; i < gemv_m; ++i) {
    // W / 4 4-wide loads (the host declines an x not aligned for them); each x is
    // widened to f32 before it is summed (MLX PR #4516 summed in the activation dtype).
    device const vec<T, 4>* xv = (device const vec<T, 4>*)(x + long(i) * args.k + k0);
    float xs[W];
    for (int v = 0; v < W / 4; ++v) {
      const float4 x4 = float4(xv[v]);
      xs[4 * v] = x4.x;
      xs[4 * v + 1] = x4.y;
      xs[4 * v + 2] = x4.z;
      xs[4 * v + 3] = x4.w;
    }
    float sum_x = 0.0f;
    for (int j = 0; j < W; ++j) sum_x += xs[j];
    for (int r = 0; r < R; ++r) {
      if (rows[r] < 0) continue;
      float dot = 0.0f;
      for (int j = 0; j < W; ++j) dot += w[r].c[j] * xs[j];
      acc[i * R + r] += F::kHasBias ? w[r].scale * dot + w[r].bias * sum_x : w[r].scale * dot;
    }
  }
}

// gemv_accumulate sets acc[i * R + r] = x_i . w[rows[r]] for the gemv_m activation rows of
// K = args.k and the R weight rows of the SIMD-group (rows[r] < 0: no row; rows[0] < 0:
// none), complete in part 0's SIMD-group (K split: the other parts' sums added through
// `partials`); the kernels differ only in which rows they take and how they store.
// W = kQuantWideChunk (the kernels' gemv16 instances, QuantGemvChunk's choice on the host): the
// lanes take 16-value chunks over the largest multiple of splits * 32 * 16 values of K,
// then 8-value chunks over the rest, so no lane takes more values than with 8-value
// chunks alone (K = 576: 16 + 8 = 24 in 2 passes instead of 3). Every thread of the
// threadgroup must call it (the split's barrier).
template <typename F, typename T, typename S, int R, int W>
inline void gemv_accumulate(device const T* x, device const uchar* data, device const S* scales,
                            device const S* biases, constant QuantizedArgs& args,
                            thread const long* rows, thread float* acc, threadgroup float* partials,
                            int32_t part, uint simdgroup, uint lane) {
  for (int i = 0; i < kQuantGemvMaxM * R; ++i) acc[i] = 0.0f;
  const int32_t position = part * kQuantSimdWidth + int32_t(lane);
  const int32_t k = rows[0] < 0 ? 0 : args.k;
  const int32_t wide_stride = args.splits * kQuantSimdWidth * W;
  const int32_t wide_end = W == kQuantChunk ? 0 : k / wide_stride * wide_stride;
  for (int32_t k0 = position * W; k0 < wide_end; k0 += wide_stride)
    gemv_chunk<F, T, S, R, W>(x, data, scales, biases, args, rows, acc, k0);
  const int32_t stride = args.splits * kQuantSimdWidth * kQuantChunk;
  for (int32_t k0 = wide_end + position * kQuantChunk; k0 < k; k0 += stride)
    gemv_chunk<F, T, S, R, kQuantChunk>(x, data, scales, biases, args, rows, acc, k0);
  for (int32_t i = 0; i < gemv_m; ++i)
    for (int r = 0; r < R; ++r) acc[i * R + r] = simd_sum(acc[i * R + r]);
  gemv_reduce_parts<kQuantGemvMaxM * R>(acc, partials, gemv_m * R, simdgroup, part, args.splits, lane);
}

// The weight rows row_base + row0 + r of this SIMD-group (-1 at and past n).
inline void gemv_rows(long row_base, int32_t row0, int32_t n, thread long* rows) {
  for (int r = 0; r < kQuantGemvRows; ++r) rows[r] = row0 + r < n ? row_base + row0 + r : -1;
}

// out[i * n + r] = x[i] . w[row_base + r] for gemv_m activation rows and the threadgroup's
// rows r < n; partials: quant_gemv_partials(kQuantGemvRows) floats.
template <typename F, typename T, typename S, int W>
inline void quantized_gemv(device const T* x, device const uchar* data, device const S* scales,
                           device const S* biases, long row_base, int32_t n, device T* out,
                           constant QuantizedArgs& args, threadgroup float* partials, uint group,
                           uint simdgroup, uint lane) {
  const QuantGemvPlace place = gemv_place(group, simdgroup, args);
  long rows[kQuantGemvRows];
  gemv_rows(row_base, place.row0, n, rows);
  float acc[kQuantGemvMaxM * kQuantGemvRows];
  gemv_accumulate<F, T, S, kQuantGemvRows, W>(x, data, scales, biases, args, rows, acc, partials, place.part,
                                           simdgroup, lane);
  if (place.part != 0 || lane != 0) return;
  for (int32_t i = 0; i < gemv_m; ++i)
    for (int r = 0; r < kQuantGemvRows; ++r)
      if (rows[r] >= 0) out[long(i) * n + place.row0 + r] = T(acc[i * kQuantGemvRows + r]);
}

#endif  // METALRT_METAL_QUANTIZED_GEMV_H_
