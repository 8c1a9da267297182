// CPU paged KV-cache write: token t's [kv_heads, head_dim] rows are copied bit-exactly
// to cache row slot_mapping[t] of the flattened [num_blocks * block_size] slot axis
// (block slot / block_size, offset slot % block_size); negative slots are padding. The
// entry point has rejected slots beyond the cache it could read; one that reaches the
// oracle anyway is skipped too (the Metal kernel does the same).
#include <cstring>

#include "metalrt/op_registry.h"

namespace metalrt::cpu {
namespace {

bool ReshapeAndCache(const OpCall& call) {
  const Tensor& key = call.inputs[0];
  const Tensor& value = call.inputs[1];
  const int64_t* slot = call.inputs[2].data_as<int64_t>();
  const Tensor& key_cache = call.outputs[0];
  const Tensor& value_cache = call.outputs[1];
  const int64_t tokens = key.dim(0);
  const int64_t num_slots = key_cache.dim(0) * key_cache.dim(1);
  const size_t row_bytes = static_cast<size_t>(key.dim(1) * key.dim(2)) * DTypeSize(key.dtype());
  for (int64_t t = 0; t < tokens; ++t) {
    if (slot[t] < 0 || slot[t] >= num_slots) continue;
    std::memcpy(static_cast<char*>(key_cache.data()) + slot[t] * row_bytes,
                static_cast<const char*>(key.data()) + t * row_bytes, row_bytes);
    std::memcpy(static_cast<char*>(value_cache.data()) + slot[t] * row_bytes,
                static_cast<const char*>(value.data()) + t * row_bytes, row_bytes);
  }
  return true;
}

METALRT_REGISTER_OP_PROVIDER("reshape_and_cache", DeviceType::kCPU, ProviderTier::kOracle,
                             ReshapeAndCache);

}  // namespace
}  // namespace metalrt::cpu
