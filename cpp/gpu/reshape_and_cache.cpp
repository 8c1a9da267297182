// Metal dispatch of reshape_and_cache: one thread per element of a token's
// kv_heads * head_dim row on a (row, tokens) grid (metal/reshape_and_cache.metal).
// Shapes beyond the kernel's index types decline.
#include <cstdint>

#include "gpu/kernel_launch.h"
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
  KernelLaunch(KernelName("reshape_and_cache", "", key.dtype()))
      .input(0, key)
      .input(1, call.inputs[1])
      .input(2, call.inputs[2])
      .output(3, key_cache)
      .output(4, call.outputs[1])
      .bytes(5, ReshapeAndCacheArgs{key_cache.dim(0) * key_cache.dim(1), static_cast<int32_t>(row), 0})
      .threads({static_cast<uint32_t>(row), static_cast<uint32_t>(key.dim(0)), 1},
               {kReshapeAndCacheThreads, 1, 1});
  return true;
}

}  // namespace

METALRT_REGISTER_OP_PROVIDER("reshape_and_cache", DeviceType::kMETAL, ProviderTier::kNative,
                             MetalReshapeAndCache);

}  // namespace metalrt::gpu
