#include "cpu/paged_kv.h"

#include "cpu/float_rows.h"

namespace metalrt::cpu {

void GatherContext(const Tensor& cache, const int32_t* blocks, int64_t len, std::vector<float>& dst) {
  const int64_t block_size = cache.dim(1), kv_heads = cache.dim(2), head_dim = cache.dim(3);
  dst.resize(static_cast<size_t>(kv_heads * len * head_dim));
  for (int64_t j = 0; j < len; ++j) {
    const int64_t slot = static_cast<int64_t>(blocks[j / block_size]) * block_size + j % block_size;
    for (int64_t g = 0; g < kv_heads; ++g)
      LoadRowF32(cache.data(), cache.dtype(), (slot * kv_heads + g) * head_dim, head_dim,
                 dst.data() + (g * len + j) * head_dim);
  }
}

}  // namespace metalrt::cpu
