// Reading and writing the rows of a paged KV cache of any type (kv_cache_args.h), the
// cache bound as bytes. The quantizers are the CPU oracle's (cpp/cpu/kv_blocks.h: GGML's
// reference q8_0 / q4_0, the same f32 operations in the same order), so a cache write
// is bit-exact with it; so is the dequantization (f16 d times the code, in f32).
#ifndef METALRT_METAL_KV_CACHE_ROWS_H_
#define METALRT_METAL_KV_CACHE_ROWS_H_
#include <metal_stdlib>
#include "kv_cache_args.h"
using namespace metal;

inline float kv_load_half(device const uchar* p) {
  return float(as_type<half>(ushort(ushort(p[0]) | ushort(ushort(p[1]) << 8))));
}

// Feature d of cache row `row` (slot * kv_heads + kv head) of a cache of `type`.
inline float kv_load(device const uchar* cache, int32_t type, long row, int32_t head_dim, int32_t d) {
  if (type == kKvF32) return ((device const float*)cache)[row * head_dim + d];
  if (type == kKvF16) return float(((device const half*)cache)[row * head_dim + d]);
  if (type == kKvBF16) return float(((device const bfloat*)cache)[row * head_dim + d]);
  device const uchar* block = cache + row * kv_row_bytes(type, head_dim) + (d / kKvQuantBlock) * kv_block_bytes(type);
  const int32_t i = d % kKvQuantBlock;
  if (type == kKvQ8_0) return kv_load_half(block) * float(as_type<char>(block[2 + i]));
  const uchar pair = block[2 + i % (kKvQuantBlock / 2)];
  return kv_load_half(block) * float(int32_t(i < kKvQuantBlock / 2 ? pair & 15 : pair >> 4) - 8);
}

inline void kv_store_half(device uchar* p, float value) {
  const ushort bits = as_type<ushort>(half(value));
  p[0] = uchar(bits & 255);
  p[1] = uchar(bits >> 8);
}

// Features d0 .. d0 + n - 1 of cache row `row` = x[0 .. n - 1]: rounded to a float type
// (any n), or one block quantized (d0 a multiple of 32, n == 32).
inline void kv_store(device uchar* cache, int32_t type, long row, int32_t head_dim, int32_t d0, int32_t n,
                     thread const float* x) {
  if (!kv_quantized(type)) {
    for (int32_t i = 0; i < kKvQuantBlock; ++i) {  // constant bound: x stays in registers once inlined
      if (i >= n) break;
      const long e = row * head_dim + d0 + i;
      if (type == kKvF32) ((device float*)cache)[e] = x[i];
      else if (type == kKvF16) ((device half*)cache)[e] = half(x[i]);
      else ((device bfloat*)cache)[e] = bfloat(x[i]);
    }
    return;
  }
  device uchar* block = cache + row * kv_row_bytes(type, head_dim) + (d0 / kKvQuantBlock) * kv_block_bytes(type);
  float amax = 0.0f, m = 0.0f;
  for (int32_t i = 0; i < kKvQuantBlock; ++i)
    if (fabs(x[i]) > amax) {
      amax = fabs(x[i]);
      m = x[i];
    }
  const float d = type == kKvQ8_0 ? amax / 127.0f : m / -8.0f;
  const float inverse = d != 0.0f ? 1.0f / d : 0.0f;
  kv_store_half(block, d);
  if (type == kKvQ8_0) {
    for (int32_t i = 0; i < kKvQuantBlock; ++i) block[2 + i] = as_type<uchar>(char(round(x[i] * inverse)));
    return;
  }
  for (int32_t i = 0; i < kKvQuantBlock / 2; ++i) {
    const int32_t lo = min(15, int32_t(char(x[i] * inverse + 8.5f)));
    const int32_t hi = min(15, int32_t(char(x[i + kKvQuantBlock / 2] * inverse + 8.5f)));
    block[2 + i] = uchar(lo | (hi << 4));
  }
}

#endif  // METALRT_METAL_KV_CACHE_ROWS_H_
