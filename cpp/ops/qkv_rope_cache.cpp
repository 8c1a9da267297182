// Entry point of qkv_rope_cache (the fused QKV split + RoPE + KV-cache write): the
// checks qkv_split, rope_<neox|interleaved> and reshape_and_cache make, on the fused
// arguments.
#include <cmath>
#include <string>

#include "ops/kv_cache_checks.h"
#include "ops/op_common.h"

namespace metalrt::ops {

Tensor QkvRopeCache(const Tensor& qkv, const Tensor& positions, const Tensor& key_cache,
                    const Tensor& value_cache, const Tensor& slot_mapping, int64_t heads,
                    int64_t rotary_dim, float base, bool neox, const OptTensor& out) {
  using namespace detail;
  constexpr const char* kOp = "qkv_rope_cache";
  CheckRank(qkv, 2, kOp, "qkv");
  CheckFloat(qkv, kOp, "qkv");
  CheckContiguous(qkv, kOp, "qkv");
  CheckRank(key_cache, 4, kOp, "key_cache");
  const int64_t tokens = qkv.dim(0), kv_heads = key_cache.dim(2);
  Check(heads > 0 && heads % kv_heads == 0, kOp,
        "heads must be a positive multiple of the caches' " + std::to_string(kv_heads) +
            " kv heads, got " + std::to_string(heads));
  // head_dim from qkv's width (a quantized cache's last dimension is its row's bytes).
  Check(qkv.dim(1) % (heads + 2 * kv_heads) == 0, kOp,
        "qkv must have (heads + 2 kv_heads) * head_dim columns (heads + 2 kv_heads = " +
            std::to_string(heads + 2 * kv_heads) + "), got " + ShapeToString(qkv.shape()));
  const int64_t head_dim = qkv.dim(1) / (heads + 2 * kv_heads);
  CheckKvCaches(key_cache, value_cache, head_dim, kOp);
  Check(rotary_dim > 0 && rotary_dim % 2 == 0 && rotary_dim <= head_dim, kOp,
        "rotary_dim must be even and in [2, head_dim=" + std::to_string(head_dim) + "], got " +
            std::to_string(rotary_dim));
  Check(std::isfinite(base) && base > 0, kOp, "base must be positive, got " + std::to_string(base));
  CheckShape(positions, {tokens}, kOp, "positions");
  CheckDType(positions, DType::kI32, kOp, "positions");
  CheckContiguous(positions, kOp, "positions");
  CheckShape(slot_mapping, {tokens}, kOp, "slot_mapping");
  CheckDType(slot_mapping, DType::kI64, kOp, "slot_mapping");
  CheckContiguous(slot_mapping, kOp, "slot_mapping");
  CheckWritableCaches(key_cache, value_cache, kOp);
  const DeviceType device =
      CommonDevice({&qkv, &positions, &key_cache, &value_cache, &slot_mapping, &OrUndefined(out)}, kOp);
  CheckSlotsInCache(slot_mapping, tokens, key_cache, kOp);
  Tensor result = OutputOrNew(out, {tokens, heads, head_dim}, qkv.dtype(), device, kOp);
  for (const Tensor* in : {&qkv, &positions, &key_cache, &value_cache, &slot_mapping})
    CheckNoOverlap(result, *in, kOp, "an input");
  RunOp(kOp, device,
        OpCall{{qkv, positions, slot_mapping}, {result, key_cache, value_cache},
               QkvRopeCacheParams{heads, rotary_dim, base, neox}});
  return result;
}

}  // namespace metalrt::ops
