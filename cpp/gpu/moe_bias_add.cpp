// Metal dispatch of moe_bias_add (metalrt/expert_ops.h): one thread per output element
// (metal/moe_bias_add.metal); in place when out is y (each thread reads then writes its
// own element). Counts past the kernel's int32 indices decline.
#include <cstdint>

#include "gpu/kernel_launch.h"
#include "metalrt/op_registry.h"
#include "moe_args.h"

namespace metalrt::gpu {
namespace {

bool MetalMoeBiasAdd(const OpCall& call) {
  const Tensor& y = call.inputs[0];
  const Tensor& bias = call.inputs[1];
  const int64_t pairs = y.dim(0) * y.dim(1), n = y.dim(2);
  if (!FitsInt(pairs * n, bias.numel()) || !FitsUint(n, pairs)) return false;
  if (pairs * n == 0) return true;
  KernelLaunch(KernelName("moe_bias_add", "", y.dtype()))
      .input(0, y)
      .input(1, bias)
      .input(2, call.inputs[2])
      .output(3, call.outputs[0])
      .bytes(4, MoeBiasAddArgs{static_cast<int32_t>(pairs), static_cast<int32_t>(n),
                               static_cast<int32_t>(bias.dim(0)), 0})
      .threads({static_cast<uint32_t>(n), static_cast<uint32_t>(pairs), 1}, {kMoeThreads, 1, 1});
  return true;
}

}  // namespace

METALRT_REGISTER_OP_PROVIDER("moe_bias_add", DeviceType::kMETAL, ProviderTier::kNative, MetalMoeBiasAdd);

}  // namespace metalrt::gpu
