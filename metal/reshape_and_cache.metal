// reshape_and_cache: the paged KV-cache write of vLLM's layout. Token t's key and value
// rows [kv_heads, head_dim] go to slot s = slot_mapping[t] of the flattened
// [num_blocks * block_size] slot axis of key_cache / value_cache
// [num_blocks, block_size, kv_heads, head_dim] (block s / block_size, row
// s % block_size); s < 0 is padding and skipped. One thread per row element of a 2-D
// grid (x: element, y: token). A bit-exact copy in any dtype, like the CPU oracle
// (cpp/cpu/reshape_and_cache.cpp). The entry point rejects slots beyond the cache
// wherever it can read them; one that reaches the kernel anyway is skipped too, never
// a write outside the cache.
#include <metal_stdlib>
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
