// Paged KV-cache write (vLLM's reshape_and_cache), into caches of any KvType. Slots are checked against the
// cache here wherever the host can read them (ReadableOnHost); a slot beyond the cache
// that reaches a provider anyway is skipped like a negative (padding) one.
#include <cstdint>
#include <limits>
#include <string>

#include "ops/kv_cache_checks.h"
#include "ops/op_common.h"

namespace metalrt::ops {
namespace detail {

std::pair<KvType, KvType> CheckKvCaches(const Tensor& key_cache, const Tensor& value_cache, int64_t head_dim,
                                        const char* op) {
  CheckRank(key_cache, 4, op, "key_cache");
  CheckRank(value_cache, 4, op, "value_cache");
  for (int d = 0; d < 3; ++d)
    Check(value_cache.dim(d) == key_cache.dim(d), op,
          "value_cache must have key_cache's [num_blocks, block_size, kv_heads] = " +
              ShapeToString({key_cache.dim(0), key_cache.dim(1), key_cache.dim(2)}) + ", got " +
              ShapeToString(value_cache.shape()));
  CheckContiguous(key_cache, op, "key_cache");
  CheckContiguous(value_cache, op, "value_cache");
  return {KvTypeOf(key_cache, head_dim, op, "key_cache"), KvTypeOf(value_cache, head_dim, op, "value_cache")};
}

void CheckWritableCaches(const Tensor& key_cache, const Tensor& value_cache, const char* op) {
  for (const Tensor* cache : {&key_cache, &value_cache})
    Check(!(cache->storage() && cache->storage()->read_only()), op,
          std::string(cache == &key_cache ? "key_cache" : "value_cache") +
              " is a view of read-only memory (e.g. an np.memmap opened with mode='r')");
}

void CheckSlotsInCache(const Tensor& slot_mapping, int64_t tokens, const Tensor& key_cache, const char* op) {
  CheckIndicesInRange(slot_mapping, tokens, std::numeric_limits<int64_t>::min(),
                      key_cache.dim(0) * key_cache.dim(1), op, [&](int64_t slot, int64_t t) {
                        return "slot " + std::to_string(slot) + " of token " + std::to_string(t) +
                               " is beyond the cache of " + std::to_string(key_cache.dim(0)) +
                               " blocks x " + std::to_string(key_cache.dim(1)) + " slots";
                      });
}

}  // namespace detail

void ReshapeAndCache(const Tensor& key, const Tensor& value, const Tensor& key_cache,
                     const Tensor& value_cache, const Tensor& slot_mapping) {
  using namespace detail;
  constexpr const char* kOp = "reshape_and_cache";
  CheckRank(key, 3, kOp, "key");
  CheckShape(value, key.shape(), kOp, "value");
  CheckShape(slot_mapping, {key.dim(0)}, kOp, "slot_mapping");
  CheckSameDType(key, value, kOp, "key", "value");
  if (IsFloating(key.dtype())) {   // a cache of any KvType
    CheckKvCaches(key_cache, value_cache, key.dim(2), kOp);
  } else {                         // a byte copy into caches of the rows' dtype
    CheckRank(key_cache, 4, kOp, "key_cache");
    CheckShape(value_cache, key_cache.shape(), kOp, "value_cache");
    CheckSameDType(key, key_cache, kOp, "key", "key_cache");
    CheckSameDType(key, value_cache, kOp, "key", "value_cache");
    CheckContiguous(key_cache, kOp, "key_cache");
    CheckContiguous(value_cache, kOp, "value_cache");
  }
  // (A float key's caches have their rows' width: CheckKvCaches.)
  Check(key_cache.dim(2) == key.dim(1) && (IsFloating(key.dtype()) || key_cache.dim(3) == key.dim(2)),
        kOp, "key_cache must be [num_blocks, block_size, " + std::to_string(key.dim(1)) + ", " +
                 std::to_string(key.dim(2)) + "] to hold key " + ShapeToString(key.shape()) + ", got " +
                 ShapeToString(key_cache.shape()));
  CheckDType(slot_mapping, DType::kI64, kOp, "slot_mapping");
  CheckContiguous(key, kOp, "key");
  CheckContiguous(value, kOp, "value");
  CheckContiguous(slot_mapping, kOp, "slot_mapping");
  CheckWritableCaches(key_cache, value_cache, kOp);
  const DeviceType device =
      CommonDevice({&key, &value, &key_cache, &value_cache, &slot_mapping}, kOp);
  CheckSlotsInCache(slot_mapping, key.dim(0), key_cache, kOp);
  RunOp(kOp, device, OpCall{{key, value, slot_mapping}, {key_cache, value_cache}, {}});
}

}  // namespace metalrt::ops
