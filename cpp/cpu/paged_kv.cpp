#include "cpu/paged_kv.h"

#include "cpu/kv_blocks.h"

namespace metalrt::cpu {

void GatherContextRange(const Tensor& cache, int64_t head_dim, const int32_t* blocks, int64_t len, int64_t begin,
                        int64_t end, float* dst, int64_t origin) {
  const int64_t block_size = cache.dim(1), kv_heads = cache.dim(2);
  const KvType type = KvTypeOf(cache, head_dim, "paged_attention", "a cache");
  for (int64_t j = begin; j < end; ++j) {
    const int64_t slot = static_cast<int64_t>(blocks[j / block_size]) * block_size + j % block_size;
    for (int64_t g = 0; g < kv_heads; ++g)
      LoadKvRows(cache.data(), type, slot * kv_heads + g, 1, head_dim, dst + (g * len + j - origin) * head_dim);
  }
}

}  // namespace metalrt::cpu
