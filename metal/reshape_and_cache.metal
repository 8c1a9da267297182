// reshape_and_cache: the paged KV-cache write of vLLM's layout. Token t's key and value
// rows [kv_heads, head_dim] go to slot s = slot_mapping[t] of the flattened
// [num_blocks * block_size] slot axis of key_cache / value_cache
// [num_blocks, block_size, kv_heads, head_dim] (block s / block_size, row
// s % block_size); s < 0 is padding and skipped. One thread per row element of a 2-D
// grid (x: element, y: token). A bit-exact copy in any dtype, like the CPU oracle
// (cpp/cpu/reshape_and_cache.cpp). The entry point rejects slots beyond the cache
// wherever it can read them; one that reaches the kernel anyway is skipped too, never
// a write outside the cache. Caches of another type than the rows' (a float type, or
// q8_0 / q4_0: kv_cache_args.h) take reshape_and_cache_kv_<dtype>.
#include <metal_stdlib>
#include "kv_cache_rows.h"
#include "reshape_and_cache_args.h"
using namespace metal;

template <typename T>
kernel void reshape_and_cache(device const T* key [[buffer(0)]],
                              device const T* value [[buffer(1)]],
                              device const long* slot_mapping [[buffer(2)]],
                              device T* key_cache [[buffer(3)]],
                              device T* value_cache [[buffer(4)]],
                              constant ReshapeAndCacheArgs& args [[buffer(5)]],
                              uint2 position [[thread_position_in_grid]]) {
  const int element = int(position.x);
  const long token = position.y;
  if (element >= args.row) return;
  const long slot = slot_mapping[token];
  if (slot < 0 || slot >= args.num_slots) return;
  key_cache[slot * args.row + element] = key[token * args.row + element];
  value_cache[slot * args.row + element] = value[token * args.row + element];
}

static_assert(kKeyTypeConstant == 2 && kValueTypeConstant == 3, "the cache types' function constants");
constant int key_type [[function_constant(2)]];
constant int value_type [[function_constant(3)]];

// Features d0 .. d0 + n - 1 of src's row `src_row` to cache row `cache_row`.
template <typename T>
inline void store_unit(device const T* src, long src_row, device uchar* cache, int32_t type, long cache_row,
                       int32_t head_dim, int32_t d0, int32_t n) {
  float x[kKvQuantBlock];
  // Bounded by the constant block (n may be shorter) so x stays in registers.
  for (int32_t i = 0; i < kKvQuantBlock; ++i) x[i] = i < n ? float(src[src_row * head_dim + d0 + i]) : 0.0f;
  kv_store(cache, type, cache_row, head_dim, d0, n, x);
}

// reshape_and_cache_kv_<dtype>: the write into caches of other types than the rows'
// (function constants key_type / value_type: a float type, rounded, or q8_0 / q4_0,
// quantized). One thread per unit of 32 features of a (token, kv head) row (a
// quantized block; the last unit of a float row may be shorter) on a 2-D grid
// (x: unit of the token's kv_heads rows, y: token).
template <typename T>
kernel void reshape_and_cache_kv(device const T* key [[buffer(0)]],
                                 device const T* value [[buffer(1)]],
                                 device const long* slot_mapping [[buffer(2)]],
                                 device uchar* key_cache [[buffer(3)]],
                                 device uchar* value_cache [[buffer(4)]],
                                 constant ReshapeAndCacheArgs& args [[buffer(5)]],
                                 uint2 position [[thread_position_in_grid]]) {
  const int32_t units = (args.head_dim + kKvQuantBlock - 1) / kKvQuantBlock;
  const int32_t kv_heads = args.row / args.head_dim;
  if (int32_t(position.x) >= kv_heads * units) return;
  const long token = position.y;
  const long slot = slot_mapping[token];
  if (slot < 0 || slot >= args.num_slots) return;
  const int32_t g = int32_t(position.x) / units, d0 = (int32_t(position.x) % units) * kKvQuantBlock;
  const int32_t n = min(kKvQuantBlock, args.head_dim - d0);
  store_unit(key, token * kv_heads + g, key_cache, key_type, slot * kv_heads + g, args.head_dim, d0, n);
  store_unit(value, token * kv_heads + g, value_cache, value_type, slot * kv_heads + g, args.head_dim, d0, n);
}

#define METALRT_RESHAPE_AND_CACHE_KV(T, SUFFIX)                                                 \
  template [[host_name("reshape_and_cache_kv_" #SUFFIX)]] kernel void reshape_and_cache_kv<T>( \
      device const T*, device const T*, device const long*, device uchar*, device uchar*,     \
      constant ReshapeAndCacheArgs&, uint2);

METALRT_RESHAPE_AND_CACHE_KV(float, f32)
METALRT_RESHAPE_AND_CACHE_KV(half, f16)
METALRT_RESHAPE_AND_CACHE_KV(bfloat, bf16)

#define METALRT_RESHAPE_AND_CACHE(T, SUFFIX)                                                    \
  template [[host_name("reshape_and_cache_" #SUFFIX)]] kernel void reshape_and_cache<T>(       \
      device const T*, device const T*, device const long*, device T*, device T*,             \
      constant ReshapeAndCacheArgs&, uint2);

METALRT_RESHAPE_AND_CACHE(float, f32)
METALRT_RESHAPE_AND_CACHE(half, f16)
METALRT_RESHAPE_AND_CACHE(bfloat, bf16)
METALRT_RESHAPE_AND_CACHE(char, i8)
METALRT_RESHAPE_AND_CACHE(uchar, u8)
METALRT_RESHAPE_AND_CACHE(int, i32)
METALRT_RESHAPE_AND_CACHE(long, i64)
METALRT_RESHAPE_AND_CACHE(uint, u32)
