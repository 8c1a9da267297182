// Reading a paged KV cache ([num_blocks, block_size, kv_heads, head_dim], vLLM's layout)
// on the CPU: shared by the paged-attention oracle and the fast prefill provider.
#pragma once
#include <cstdint>
#include <vector>

#include "metalrt/tensor.h"

namespace metalrt::cpu {

// dst[g][j][:] = the cache row of kv head g at context position j < len, in f32, the
// position's slot found through the request's block table `blocks` (validated by the
// entry point). Gathered once per request, so the block lookup and dtype conversion are
// not repeated per query and head.
void GatherContext(const Tensor& cache, const int32_t* blocks, int64_t len, std::vector<float>& dst);

// The positions [begin, end) of GatherContext into dst, already sized kv_heads x len x
// head_dim: so that threads can gather disjoint ranges.
void GatherContextRange(const Tensor& cache, const int32_t* blocks, int64_t len, int64_t begin, int64_t end,
                        float* dst);

}  // namespace metalrt::cpu
