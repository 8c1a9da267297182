// The matmul_bt GEMV body (design: metal/matmul.metal's header), shared by the plain and
// the K-split kernels: kGemvRows weight rows per SIMD-group sharing every activation
// load, kGemvChunk values per lane and iteration in 4-wide vector loads, m <= kGemvMaxM
// activation rows per weight load.
#ifndef METALRT_METAL_MATMUL_GEMV_H_
#define METALRT_METAL_MATMUL_GEMV_H_
#include <metal_stdlib>
#include "gemv_split.h"
#include "matmul_args.h"
using namespace metal;

// The kGemvChunk values at p as f32: two 4-wide loads (the host only sends K % 8 == 0
// and 4-element-aligned a and b, so every chunk is aligned).
template <typename T>
inline void gemv_load_chunk(device const T* p, thread float* v) {
  device const vec<T, 4>* q = (device const vec<T, 4>*)p;
  const float4 lo = float4(q[0]), hi = float4(q[1]);
  v[0] = lo.x; v[1] = lo.y; v[2] = lo.z; v[3] = lo.w;
  v[4] = hi.x; v[5] = hi.y; v[6] = hi.z; v[7] = hi.w;
}

// acc[i * kGemvRows + r] = a_i . b[row0 + r] over the chunks of K this SIMD-group takes
// (part `part` of `splits`), summed over its lanes, for i < args.m. Rows at and past n
// read row n - 1 instead (no branch in the loop; their sums are never stored).
template <typename T>
inline void gemv_accumulate(device const T* a, device const T* b, constant MatmulArgs& args, int32_t row0,
                            int32_t part, int32_t splits, uint lane, thread float* acc) {
  for (int e = 0; e < kGemvMaxM * kGemvRows; ++e) acc[e] = 0.0f;
  device const T* w_rows[kGemvRows];
  for (int r = 0; r < kGemvRows; ++r) w_rows[r] = b + long(min(row0 + r, args.n - 1)) * args.k;
  const int32_t stride = splits * kMatmulSimdWidth * kGemvChunk;
  for (int32_t k0 = (part * kMatmulSimdWidth + int32_t(lane)) * kGemvChunk; k0 < args.k; k0 += stride) {
    float w[kGemvRows][kGemvChunk];
    for (int r = 0; r < kGemvRows; ++r) gemv_load_chunk(w_rows[r] + k0, w[r]);
    for (int32_t i = 0; i < args.m; ++i) {
      float x[kGemvChunk];
      gemv_load_chunk(a + long(i) * args.k + k0, x);
      for (int r = 0; r < kGemvRows; ++r) {
        float dot = 0.0f;
        for (int j = 0; j < kGemvChunk; ++j) dot += w[r][j] * x[j];
        acc[i * kGemvRows + r] += dot;
      }
    }
  }
  for (int32_t i = 0; i < args.m; ++i)
    for (int r = 0; r < kGemvRows; ++r) acc[i * kGemvRows + r] = simd_sum(acc[i * kGemvRows + r]);
}

// out[i * n + row0 + r] = acc[i * kGemvRows + r] in T, rows below n, from lane 0.
template <typename T>
inline void gemv_store(thread const float* acc, device T* out, constant MatmulArgs& args, int32_t row0, uint lane) {
  if (lane != 0) return;
  for (int32_t i = 0; i < args.m; ++i)
    for (int r = 0; r < kGemvRows && row0 + r < args.n; ++r)
      out[long(i) * args.n + row0 + r] = T(acc[i * kGemvRows + r]);
}

#endif  // METALRT_METAL_MATMUL_GEMV_H_
