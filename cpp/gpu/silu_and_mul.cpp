// Metal dispatch of silu_and_mul (SwiGLU): one thread per output element
// (metal/silu_and_mul.metal). A tensor too large for the kernel's uint32 index declines.
#include <cstdint>

#include "elementwise_args.h"
#include "gpu/kernel_launch.h"
#include "metalrt/op_registry.h"

namespace metalrt::gpu {
namespace {

bool MetalSiluAndMul(const OpCall& call) {
  const Tensor& x = call.inputs[0];
  const Tensor& out = call.outputs[0];
  if (!FitsUint(x.numel())) return false;
  const auto n = static_cast<uint32_t>(out.numel());
  KernelLaunch(KernelName("silu_and_mul", "", x.dtype()))
      .input(0, x)
      .output(1, out)
      .bytes(2, ElementwiseArgs{n, static_cast<uint32_t>(out.dim(-1))})
      .threads({n, 1, 1}, {kElementwiseThreads, 1, 1});
  return true;
}

}  // namespace

METALRT_REGISTER_OP_PROVIDER("silu_and_mul", DeviceType::kMETAL, ProviderTier::kNative, MetalSiluAndMul);

}  // namespace metalrt::gpu
