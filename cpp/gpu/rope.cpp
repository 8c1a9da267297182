// Metal dispatch of the RoPE family (metal/rope.metal): rope_neox, rope_interleaved and
// rope_from_cache run one threadgroup per token; rope_cos_sin_cache one thread per
// (pair, token).
#include <algorithm>
#include <cstdint>

#include "gpu/kernel_launch.h"
#include "gpu/rope_frequencies.h"
#include "metalrt/op_registry.h"
#include "metalrt/ops.h"
#include "rope_args.h"

namespace metalrt::gpu {
namespace {

// The kernels' int32 element counts within one token, uint32 token count.
bool FitsKernelIndices(const Tensor& x) {
  return FitsInt(x.dim(1) * x.dim(2)) && FitsUint(x.dim(0));
}

template <bool kNeox>
bool MetalRope(const OpCall& call) {
  const Tensor& x = call.inputs[0];
  const auto& p = call.param<ops::RopeParams>();
  if (!RopeKernelsServe(p.rotary_dim) || !FitsKernelIndices(x)) return false;
  const std::vector<float> freq = RopeTurnFrequencies(p.rotary_dim, p.base);
  KernelLaunch(KernelName("rope", kNeox ? "neox" : "interleaved", x.dtype()))
      .input(0, x)
      .input(1, call.inputs[1])
      .bytes(2, freq.data(), freq.size() * sizeof(float))
      .output(3, call.outputs[0])
      .bytes(4, RopeArgs{static_cast<int32_t>(x.dim(1)), static_cast<int32_t>(x.dim(2)),
                         static_cast<int32_t>(p.rotary_dim), 0})
      .threadgroups({static_cast<uint32_t>(x.dim(0)), 1, 1}, {kRopeThreads, 1, 1});
  return true;
}

bool MetalRopeCosSinCache(const OpCall& call) {
  const Tensor& positions = call.inputs[0];
  const auto& p = call.param<ops::RopeParams>();
  if (!RopeKernelsServe(p.rotary_dim) || !FitsUint(positions.dim(0)))
    return false;
  const std::vector<float> freq = RopeTurnFrequencies(p.rotary_dim, p.base);
  const uint32_t half = static_cast<uint32_t>(p.rotary_dim / 2);
  KernelLaunch(KernelName("rope_cos_sin_cache", "", DType::kF32))
      .input(0, positions)
      .bytes(1, freq.data(), freq.size() * sizeof(float))
      .output(2, call.outputs[0])
      .bytes(3, RopeArgs{0, 0, static_cast<int32_t>(p.rotary_dim), 0})
      .threads({half, static_cast<uint32_t>(positions.dim(0)), 1},
               {std::min<uint32_t>(half, kRopeThreads), 1, 1});
  return true;
}

// The entry point (cpp/ops/rope.cpp) has checked every row index against the cache.
bool MetalRopeFromCache(const OpCall& call) {
  const Tensor& x = call.inputs[0];
  const Tensor& cache = call.inputs[1];
  if (!FitsKernelIndices(x) || !FitsInt(cache.dim(0))) return false;
  const bool neox = call.param<ops::RopeFromCacheParams>().neox;
  KernelLaunch(KernelName("rope_from_cache", neox ? "neox" : "interleaved", x.dtype()))
      .input(0, x)
      .input(1, cache)
      .input(2, call.inputs[2])
      .output(3, call.outputs[0])
      .bytes(4, RopeArgs{static_cast<int32_t>(x.dim(1)), static_cast<int32_t>(x.dim(2)),
                         static_cast<int32_t>(cache.dim(1)), static_cast<int32_t>(cache.dim(0))})
      .threadgroups({static_cast<uint32_t>(x.dim(0)), 1, 1}, {kRopeThreads, 1, 1});
  return true;
}

}  // namespace

METALRT_REGISTER_OP_PROVIDER("rope_neox", DeviceType::kMETAL, ProviderTier::kNative, MetalRope<true>);
METALRT_REGISTER_OP_PROVIDER("rope_interleaved", DeviceType::kMETAL, ProviderTier::kNative,
                             MetalRope<false>);
METALRT_REGISTER_OP_PROVIDER("rope_cos_sin_cache", DeviceType::kMETAL, ProviderTier::kNative,
                             MetalRopeCosSinCache);
METALRT_REGISTER_OP_PROVIDER("rope_from_cache", DeviceType::kMETAL, ProviderTier::kNative,
                             MetalRopeFromCache);

}  // namespace metalrt::gpu
