// Reading a paged KV cache ([num_blocks, block_size, kv_heads, head_dim], vLLM's layout,
// of any KvType: metalrt/kv_type.h) on the CPU, for the paged-attention oracle (the
// reference tier, cpp/cpu/paged_attention.cpp), which converts a request's whole visible
// context once; the fast prefill providers convert a tile at a time instead
// (cpu/fast/prefill/prefill_attention.h's LoadTile).
#pragma once
#include <cstdint>

#include "metalrt/tensor.h"

namespace metalrt::cpu {

// dst[g][j - origin][:] = the cache row of kv head g at context position j, for the
// positions begin <= j < end (origin <= begin; len rows a kv head), in f32, the position's slot found through the
// request's block table `blocks` (validated by the entry point); dst is already sized
// kv_heads x len x head_dim. Gathered once per request, so the block lookup and dtype
// conversion (dequantization) are not repeated per query and head; threads may gather disjoint ranges, and
// positions no query sees (before a sliding window) are left out.
void GatherContextRange(const Tensor& cache, int64_t head_dim, const int32_t* blocks, int64_t len, int64_t begin, int64_t end,
                        float* dst, int64_t origin = 0);

}  // namespace metalrt::cpu
