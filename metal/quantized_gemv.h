// The quantized GEMV body (design: metal/quantized.metal's header), shared by
// quantized_matmul_bt_gemv (the whole weight), its fused-epilogue variants
// (quantized_matmul_bt_add_gemv, quantized_matmul_bt_swiglu_gemv) and
// moe_matmul_bt_gemv (one expert's rows).
#ifndef METALRT_METAL_QUANTIZED_GEMV_H_
#define METALRT_METAL_QUANTIZED_GEMV_H_
#include <metal_stdlib>
#include "quantized_blocks.h"
using namespace metal;

// gemv_accumulate sets acc[i * R + r] = x_i . w[rows[r]] (summed over the SIMD-group)
// for the m activation rows of K = args.k and the R weight rows of the SIMD-group
// (rows[r] < 0: no row); the kernels differ only in which rows they take and how
// they store.
template <typename F, typename T, typename S, int R>
inline void gemv_accumulate(device const T* x, int32_t m, device const uchar* data, device const S* scales,
                            device const S* biases, constant QuantizedArgs& args,
                            thread const long* rows, thread float* acc, uint lane) {
  for (int i = 0; i < kQuantGemvMaxM * R; ++i) acc[i] = 0.0f;
  for (int32_t k0 = int32_t(lane) * kQuantChunk; k0 < args.k; k0 += kQuantSimdWidth * kQuantChunk) {
    QuantChunk w[R];
    for (int r = 0; r < R; ++r)
      if (rows[r] >= 0) w[r] = load_chunk<F>(data, scales, biases, rows[r], k0, args);
    for (int32_t i = 0; i < m; ++i) {
      // Two 4-wide loads (the host declines an x not aligned for them); each x is
      // widened to f32 before it is summed (MLX PR #4516 summed in the activation dtype).
      device const vec<T, 4>* xv = (device const vec<T, 4>*)(x + long(i) * args.k + k0);
      const float4 lo = float4(xv[0]), hi = float4(xv[1]);
      const float xs[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
      float sum_x = 0.0f;
      for (int j = 0; j < 8; ++j) sum_x += xs[j];
      for (int r = 0; r < R; ++r) {
        if (rows[r] < 0) continue;
        float dot = 0.0f;
        for (int j = 0; j < 8; ++j) dot += w[r].c[j] * xs[j];
        acc[i * R + r] += F::kHasBias ? w[r].scale * dot + w[r].bias * sum_x : w[r].scale * dot;
      }
    }
  }
  for (int32_t i = 0; i < m; ++i)
    for (int r = 0; r < R; ++r) acc[i * R + r] = simd_sum(acc[i * R + r]);
}

// The first of the kQuantGemvRows output rows of this SIMD-group.
inline int32_t gemv_row0(uint group, uint simdgroup) {
  return (int32_t(group) * kQuantGemvSimdgroups + int32_t(simdgroup)) * kQuantGemvRows;
}

// The weight rows row_base + row0 + r of this SIMD-group (-1 at and past n).
inline void gemv_rows(long row_base, int32_t row0, int32_t n, thread long* rows) {
  for (int r = 0; r < kQuantGemvRows; ++r) rows[r] = row0 + r < n ? row_base + row0 + r : -1;
}

// out[i * n + r] = x[i] . w[row_base + r] for m activation rows and the threadgroup's
// block of kQuantGemvRows * kQuantGemvSimdgroups rows r < n.
template <typename F, typename T, typename S>
inline void quantized_gemv(device const T* x, int32_t m, device const uchar* data, device const S* scales,
                           device const S* biases, long row_base, int32_t n, device T* out,
                           constant QuantizedArgs& args, uint group, uint simdgroup, uint lane) {
  const int32_t row0 = gemv_row0(group, simdgroup);
  if (row0 >= n) return;
  long rows[kQuantGemvRows];
  gemv_rows(row_base, row0, n, rows);
  float acc[kQuantGemvMaxM * kQuantGemvRows];
  gemv_accumulate<F, T, S, kQuantGemvRows>(x, m, data, scales, biases, args, rows, acc, lane);
  for (int32_t i = 0; i < m; ++i)
    for (int r = 0; r < kQuantGemvRows; ++r)
      if (lane == 0 && rows[r] >= 0) out[long(i) * n + row0 + r] = T(acc[i * kQuantGemvRows + r]);
}

#endif  // METALRT_METAL_QUANTIZED_GEMV_H_
