// Metal dispatch of qkv_rope_cache (metal/qkv_rope_cache.metal): one threadgroup per
// token; the frequencies are rope's (two floats per pair, passed by setBytes). Caches of
// another type than qkv's take qkv_rope_cache_kv_<variant>_<dtype> (types as function
// constants); a k/v row wider than it stages declines.
#include <cstdint>

#include "gpu/kernel_launch.h"
#include "gpu/rope_frequencies.h"
#include "kv_cache_args.h"
#include "metalrt/kv_type.h"
#include "metalrt/op_registry.h"
#include "metalrt/ops.h"
#include "qkv_rope_cache_args.h"

namespace metalrt::gpu {
namespace {

bool MetalQkvRopeCache(const OpCall& call) {
  const Tensor& qkv = call.inputs[0];
  const Tensor& key_cache = call.outputs[1];
  const auto& p = call.param<ops::QkvRopeCacheParams>();
  const Tensor& value_cache = call.outputs[2];
  const int64_t kv_heads = key_cache.dim(2), head_dim = qkv.dim(1) / (p.heads + 2 * kv_heads);
  if (!RopeKernelsServe(p.rotary_dim) || !FitsInt(qkv.dim(1)) || !FitsUint(qkv.dim(0))) return false;
  const bool as_is = key_cache.dtype() == qkv.dtype() && value_cache.dtype() == qkv.dtype();
  if (!as_is && kv_heads * head_dim > kQkvRopeCacheMaxKvWidth) return false;
  const std::vector<float> freq = RopeTurnFrequencies(p.rotary_dim, p.base);
  const std::string variant = std::string(as_is ? "" : "kv_") + (p.neox ? "neox" : "interleaved");
  const FunctionConstants constants =
      as_is ? FunctionConstants{}
            : FunctionConstants{
                  Constant(kKeyTypeConstant, static_cast<int32_t>(KvTypeOf(key_cache, head_dim, "qkv_rope_cache",
                                                                          "key_cache"))),
                  Constant(kValueTypeConstant, static_cast<int32_t>(KvTypeOf(value_cache, head_dim,
                                                                            "qkv_rope_cache", "value_cache")))};
  KernelLaunch(KernelName("qkv_rope_cache", variant, qkv.dtype()), constants)
      .input(0, qkv)
      .input(1, call.inputs[1])
      .input(2, call.inputs[2])
      .bytes(3, freq.data(), freq.size() * sizeof(float))
      .output(4, call.outputs[0])
      .output(5, key_cache)
      .output(6, value_cache)
      .bytes(7, QkvRopeCacheArgs{key_cache.dim(0) * key_cache.dim(1), static_cast<int32_t>(p.heads),
                                 static_cast<int32_t>(kv_heads), static_cast<int32_t>(head_dim),
                                 static_cast<int32_t>(p.rotary_dim)})
      .threadgroups({static_cast<uint32_t>(qkv.dim(0)), 1, 1}, {kRopeThreads, 1, 1});
  return true;
}

}  // namespace

METALRT_REGISTER_OP_PROVIDER("qkv_rope_cache", DeviceType::kMETAL, ProviderTier::kNative, MetalQkvRopeCache);

}  // namespace metalrt::gpu
