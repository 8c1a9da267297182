// The quantized GEMV body (design: metal/quantized.metal's header), shared by
// quantized_matmul_bt_gemv (the whole weight) and moe_matmul_bt_gemv (one expert's
// rows): out[i * n + r] = x[i] . w[row_base + r] for m activation rows of K = args.k
// and the threadgroup's block of kQuantGemvRows * kQuantGemvSimdgroups rows r < n.
#ifndef METALRT_METAL_QUANTIZED_GEMV_H_
#define METALRT_METAL_QUANTIZED_GEMV_H_
#include <metal_stdlib>
#include "quantized_blocks.h"
using namespace metal;

template <typename F, typename T, typename S>
inline void quantized_gemv(device const T* x, int32_t m, device const uchar* data, device const S* scales,
                           device const S* biases, long row_base, int32_t n, device T* out,
                           constant QuantizedArgs& args, uint group, uint simdgroup, uint lane) {
  const int32_t row0 = (int32_t(group) * kQuantGemvSimdgroups + int32_t(simdgroup)) * kQuantGemvRows;
  if (row0 >= n) return;
  float acc[kQuantGemvMaxM][kQuantGemvRows];
  for (int i = 0; i < kQuantGemvMaxM; ++i)
    for (int r = 0; r < kQuantGemvRows; ++r) acc[i][r] = 0.0f;
  for (int32_t k0 = int32_t(lane) * kQuantChunk; k0 < args.k; k0 += kQuantSimdWidth * kQuantChunk) {
    QuantChunk w[kQuantGemvRows];
    for (int r = 0; r < kQuantGemvRows; ++r)
      if (row0 + r < n) w[r] = load_chunk<F>(data, scales, biases, row_base + row0 + r, k0, args);
    for (int32_t i = 0; i < m; ++i) {
      // Two 4-wide loads (the host declines an x not aligned for them); each x is
      // widened to f32 before it is summed (MLX PR #4516 summed in the activation dtype).
      device const vec<T, 4>* xv = (device const vec<T, 4>*)(x + long(i) * args.k + k0);
      const float4 lo = float4(xv[0]), hi = float4(xv[1]);
      const float xs[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
      float sum_x = 0.0f;
      for (int j = 0; j < 8; ++j) sum_x += xs[j];
      for (int r = 0; r < kQuantGemvRows; ++r) {
        if (row0 + r >= n) break;
        float dot = 0.0f;
        for (int j = 0; j < 8; ++j) dot += w[r].c[j] * xs[j];
        acc[i][r] += F::kHasBias ? w[r].scale * dot + w[r].bias * sum_x : w[r].scale * dot;
      }
    }
  }
  for (int32_t i = 0; i < m; ++i)
    for (int r = 0; r < kQuantGemvRows; ++r) {
      const float total = simd_sum(acc[i][r]);
      if (lane == 0 && row0 + r < n) out[long(i) * n + row0 + r] = T(total);
    }
}

#endif  // METALRT_METAL_QUANTIZED_GEMV_H_
