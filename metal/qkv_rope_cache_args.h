// Arguments of the fused QKV split + RoPE + KV-cache write kernel
// (metal/qkv_rope_cache.metal), shared by the host dispatch (cpp/gpu/qkv_rope_cache.cpp)
// and MSL. One threadgroup per token of kRopeThreads threads (rope_args.h).
#ifndef METALRT_METAL_QKV_ROPE_CACHE_ARGS_H_
#define METALRT_METAL_QKV_ROPE_CACHE_ARGS_H_
#include "metal_constants.h"
#ifndef __METAL_VERSION__
#include <cstdint>
#endif

// The widest k / v row (kv_heads * head_dim) qkv_rope_cache_kv stages: 2 x 8 KiB of f32
// with the 4 KiB cos|sin row, inside the 32 KiB of threadgroup memory.
METALRT_CONSTANT int32_t kQkvRopeCacheMaxKvWidth = 2048;

struct QkvRopeCacheArgs {
  int64_t cache_slots;   // num_blocks * block_size: a slot at or past it is skipped
  int32_t heads;         // query heads; a qkv row is [heads + 2 kv_heads, head_dim]
  int32_t kv_heads;
  int32_t head_dim;
  int32_t rotary_dim;
};
static_assert(sizeof(QkvRopeCacheArgs) == 24, "QkvRopeCacheArgs must match between host and MSL");

#endif  // METALRT_METAL_QKV_ROPE_CACHE_ARGS_H_
