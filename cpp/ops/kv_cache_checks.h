// Checks of a paged KV cache, shared by reshape_and_cache, qkv_rope_cache and
// paged_attention (cpp/ops/reshape_and_cache.cpp).
#pragma once
#include <cstdint>

#include <utility>

#include "metalrt/kv_type.h"
#include "metalrt/tensor.h"

namespace metalrt::ops::detail {

// key_cache and value_caches are contiguous caches [num_blocks, block_size, kv_heads, *]
// of one geometry, each holding rows of head_dim features in a type of its own
// (metalrt/kv_type.h: a float dtype, or uint8 q8_0 / q4_0 rows); ValueError naming the
// layouts otherwise. Returns their types (key, value).
std::pair<KvType, KvType> CheckKvCaches(const Tensor& key_cache, const Tensor& value_cache, int64_t head_dim,
                                        const char* op);
// The caches are written in place: a view of read-only memory would fault.
void CheckWritableCaches(const Tensor& key_cache, const Tensor& value_cache, const char* op);
// Negative slots are padding (skipped); the rest must lie inside the cache
// [num_blocks, block_size, ...] (checked wherever the host can read slot_mapping).
void CheckSlotsInCache(const Tensor& slot_mapping, int64_t tokens, const Tensor& key_cache, const char* op);

}  // namespace metalrt::ops::detail
