#include "cpu/paged_kv.h"

#include "cpu/float_rows.h"

namespace metalrt::cpu {

void GatherContextRange(const Tensor& cache, const int32_t* blocks, int64_t len, int64_t begin, int64_t end,
                        float* dst, int64_t origin) {
  const int64_t block_size = cache.dim(1), kv_heads = cache.dim(2), head_dim = cache.dim(3);
  for (int64_t j = begin; j < end; ++j) {
    const int64_t slot = static_cast<int64_t>(blocks[j / block_size]) * block_size + j % block_size;
    for (int64_t g = 0; g < kv_heads; ++g)
      LoadRowF32(cache.data(), cache.dtype(), (slot * kv_heads + g) * head_dim, head_dim,
                 dst + (g * len + j - origin) * head_dim);
  }
}

}  // namespace metalrt::cpu
