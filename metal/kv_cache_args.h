// The element types of a paged KV cache (cpp/include/metalrt/kv_type.h's KvType codes),
// shared by the host dispatch (cpp/gpu) and MSL: the kernels that read or write a cache
// take each side's type as a function constant (so a Metal pipeline is specialised to
// it), the cache bound as bytes.
#ifndef METALRT_METAL_KV_CACHE_ARGS_H_
#define METALRT_METAL_KV_CACHE_ARGS_H_
#include "metal_constants.h"
#ifndef __METAL_VERSION__
#include <cstdint>
#endif

METALRT_CONSTANT int32_t kKvF32 = 0;
METALRT_CONSTANT int32_t kKvF16 = 1;
METALRT_CONSTANT int32_t kKvBF16 = 2;
METALRT_CONSTANT int32_t kKvQ8_0 = 3;    // 34-byte blocks: f16 d, 32 int8 q; x = d q
METALRT_CONSTANT int32_t kKvQ4_0 = 4;    // 18-byte blocks: f16 d, 16 bytes of nibbles; x = d (q - 8)
METALRT_CONSTANT int32_t kKvQuantBlock = 32;
// The function constants of the key and value caches' types.
METALRT_CONSTANT uint32_t kKeyTypeConstant = 2;
METALRT_CONSTANT uint32_t kValueTypeConstant = 3;

// Bytes of one quantized block, or of one element of a float type.
inline int32_t kv_block_bytes(int32_t type) {
  return type == kKvQ8_0 ? 2 + kKvQuantBlock : type == kKvQ4_0 ? 2 + kKvQuantBlock / 2 : type == kKvF32 ? 4 : 2;
}
inline bool kv_quantized(int32_t type) { return type == kKvQ8_0 || type == kKvQ4_0; }
// Bytes of a (slot, kv head) row of head_dim features.
inline long kv_row_bytes(int32_t type, int32_t head_dim) {
  return kv_quantized(type) ? long(head_dim / kKvQuantBlock) * kv_block_bytes(type)
                            : long(head_dim) * kv_block_bytes(type);
}

#endif  // METALRT_METAL_KV_CACHE_ARGS_H_
