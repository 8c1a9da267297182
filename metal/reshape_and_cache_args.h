// Arguments and tuning constants of the reshape_and_cache kernels
// (metal/reshape_and_cache.metal), shared by the host dispatch
// (cpp/gpu/reshape_and_cache.cpp) and MSL. A 2-D grid: x runs along a token's
// kv_heads * head_dim row, y over the tokens.
#ifndef METALRT_METAL_RESHAPE_AND_CACHE_ARGS_H_
#define METALRT_METAL_RESHAPE_AND_CACHE_ARGS_H_
#include "metal_constants.h"
#ifndef __METAL_VERSION__
#include <cstdint>
#endif

METALRT_CONSTANT uint32_t kReshapeAndCacheThreads = 256;

struct ReshapeAndCacheArgs {
  int64_t num_slots;   // num_blocks * block_size; slots outside [0, num_slots) are skipped
  int32_t row;         // kv_heads * head_dim elements per token
  int32_t head_dim;    // features per (token, kv head) row (read by reshape_and_cache_kv)
};
static_assert(sizeof(ReshapeAndCacheArgs) == 16, "ReshapeAndCacheArgs must match between host and MSL");

#endif  // METALRT_METAL_RESHAPE_AND_CACHE_ARGS_H_
