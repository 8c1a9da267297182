// Checks of a paged KV-cache write, shared by reshape_and_cache and qkv_rope_cache
// (cpp/ops/reshape_and_cache.cpp).
#pragma once
#include <cstdint>

#include "metalrt/tensor.h"

namespace metalrt::ops::detail {

// The caches are written in place: a view of read-only memory would fault.
void CheckWritableCaches(const Tensor& key_cache, const Tensor& value_cache, const char* op);
// Negative slots are padding (skipped); the rest must lie inside the cache
// [num_blocks, block_size, ...] (checked wherever the host can read slot_mapping).
void CheckSlotsInCache(const Tensor& slot_mapping, int64_t tokens, const Tensor& key_cache, const char* op);

}  // namespace metalrt::ops::detail
