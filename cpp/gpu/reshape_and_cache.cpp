// Metal dispatch of reshape_and_cache: one thread per element of a token's
// kv_heads * head_dim row on a (row, tokens) grid (metal/reshape_and_cache.metal).
// Caches of another type than the rows' take reshape_and_cache_kv_<dtype>, one thread per
// 32 features (a quantized block). Shapes beyond the kernel's index types decline.
#include <cstdint>

#include "gpu/kernel_launch.h"
#include "kv_cache_args.h"
#include "metalrt/kv_type.h"
#include "metalrt/op_registry.h"
#include "reshape_and_cache_args.h"

namespace metalrt::gpu {
namespace {

bool MetalReshapeAndCache(const OpCall& call) {
  const Tensor& key = call.inputs[0];
  const Tensor& key_cache = call.outputs[0];
  const int64_t row = key.dim(1) * key.dim(2);
  if (!FitsInt(row) || !FitsUint(key.dim(0)))
    return false;
  const int64_t head_dim = key.dim(2);
  const bool copy = key_cache.dtype() == key.dtype() && call.outputs[1].dtype() == key.dtype();
  // A copy: one thread per element; otherwise one per 32-feature unit of a row.
  const int64_t width = copy ? row : key.dim(1) * ((head_dim + kKvQuantBlock - 1) / kKvQuantBlock);
  FunctionConstants constants;
  if (!copy)
    constants = {Constant(kKeyTypeConstant, static_cast<int32_t>(KvTypeOf(key_cache, head_dim, "reshape_and_cache",
                                                                          "key_cache"))),
                 Constant(kValueTypeConstant, static_cast<int32_t>(KvTypeOf(call.outputs[1], head_dim,
                                                                            "reshape_and_cache", "value_cache")))};
  KernelLaunch(KernelName("reshape_and_cache", copy ? "" : "kv", key.dtype()), constants)
      .input(0, key)
      .input(1, call.inputs[1])
      .input(2, call.inputs[2])
      .output(3, key_cache)
      .output(4, call.outputs[1])
      .bytes(5, ReshapeAndCacheArgs{key_cache.dim(0) * key_cache.dim(1), static_cast<int32_t>(row),
                                    static_cast<int32_t>(head_dim)})
      .threads({static_cast<uint32_t>(width), static_cast<uint32_t>(key.dim(0)), 1},
               {kReshapeAndCacheThreads, 1, 1});
  return true;
}

}  // namespace

METALRT_REGISTER_OP_PROVIDER("reshape_and_cache", DeviceType::kMETAL, ProviderTier::kNative,
                             MetalReshapeAndCache);

}  // namespace metalrt::gpu
