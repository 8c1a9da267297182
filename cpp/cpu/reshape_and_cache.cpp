// CPU paged KV-cache write: token t's [kv_heads, head_dim] rows go to cache row
// slot_mapping[t] of the flattened [num_blocks * block_size] slot axis (block
// slot / block_size, offset slot % block_size); negative slots are padding. A cache of
// the rows' dtype gets a bit-exact copy; any other cache type (metalrt/kv_type.h) gets
// each (token, kv head) row rounded or quantized (cpu/kv_blocks.h). The entry point has
// rejected slots beyond the cache it could read; one that reaches the oracle anyway is
// skipped too (the Metal kernel does the same).
#include <cstring>
#include <vector>

#include "cpu/float_rows.h"
#include "cpu/kv_blocks.h"
#include "metalrt/op_registry.h"

namespace metalrt::cpu {
namespace {

// Writes rows (token t's [kv_heads, head_dim]) of `src` into `cache` at slot[t].
void WriteRows(const Tensor& src, const Tensor& cache, const int64_t* slot) {
  const int64_t tokens = src.dim(0), kv_heads = src.dim(1), head_dim = src.dim(2);
  const int64_t num_slots = cache.dim(0) * cache.dim(1);
  // Rows of the cache's own dtype (any dtype: a byte copy); else a float cache type.
  const bool copy = cache.dtype() == src.dtype();
  const KvType type = copy ? KvType::kF32 : KvTypeOf(cache, head_dim, "reshape_and_cache", "a cache");
  const size_t row_bytes = static_cast<size_t>(kv_heads * head_dim) * DTypeSize(src.dtype());
  std::vector<float> row(static_cast<size_t>(head_dim));
  for (int64_t t = 0; t < tokens; ++t) {
    if (slot[t] < 0 || slot[t] >= num_slots) continue;
    if (copy) {
      std::memcpy(static_cast<char*>(cache.data()) + slot[t] * row_bytes,
                  static_cast<const char*>(src.data()) + t * row_bytes, row_bytes);
      continue;
    }
    for (int64_t g = 0; g < kv_heads; ++g) {
      LoadRowF32(src.data(), src.dtype(), (t * kv_heads + g) * head_dim, head_dim, row.data());
      StoreKvRow(cache.data(), type, slot[t] * kv_heads + g, head_dim, row.data());
    }
  }
}

bool ReshapeAndCache(const OpCall& call) {
  const int64_t* slot = call.inputs[2].data_as<int64_t>();
  WriteRows(call.inputs[0], call.outputs[0], slot);
  WriteRows(call.inputs[1], call.outputs[1], slot);
  return true;
}

METALRT_REGISTER_OP_PROVIDER("reshape_and_cache", DeviceType::kCPU, ProviderTier::kOracle,
                             ReshapeAndCache);

}  // namespace
}  // namespace metalrt::cpu
