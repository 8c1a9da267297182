// Metal dispatch of cast: one thread per element (metal/cast.metal), the kernel
// "cast_<source dtype>_<target dtype>", e.g. cast_f32_bf16. A tensor too large for the
// kernels' uint32 index declines.
#include <cstdint>

#include "cast_args.h"
#include "gpu/kernel_launch.h"
#include "metalrt/op_registry.h"

namespace metalrt::gpu {
namespace {

bool MetalCast(const OpCall& call) {
  const Tensor& x = call.inputs[0];
  const Tensor& out = call.outputs[0];
  if (!FitsUint(x.numel())) return false;
  const auto n = static_cast<uint32_t>(x.numel());
  KernelLaunch(KernelName("cast", KernelDTypeSuffix(x.dtype()), out.dtype()))
      .input(0, x)
      .output(1, out)
      .bytes(2, CastArgs{n, 0})
      .threads({n, 1, 1}, {kCastThreads, 1, 1});
  return true;
}

}  // namespace

METALRT_REGISTER_OP_PROVIDER("cast", DeviceType::kMETAL, ProviderTier::kNative, MetalCast);

}  // namespace metalrt::gpu
