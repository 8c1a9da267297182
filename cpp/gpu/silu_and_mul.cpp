// Metal dispatch of silu_and_mul (SwiGLU, or its swiglu_oai variant: the activation in
// the op's GluParams, metalrt/expert_ops.h): one thread per output element
// (metal/silu_and_mul.metal). A tensor too large for the kernel's uint32 index declines.
#include <any>
#include <cstdint>

#include "elementwise_args.h"
#include "gpu/kernel_launch.h"
#include "metalrt/expert_ops.h"
#include "metalrt/op_registry.h"

namespace metalrt::gpu {
namespace {

bool MetalSiluAndMul(const OpCall& call) {
  const Tensor& x = call.inputs[0];
  const Tensor& out = call.outputs[0];
  if (!FitsUint(x.numel())) return false;
  const auto* p = std::any_cast<ops::GluParams>(&call.params);
  const ops::GluParams params = p != nullptr ? *p : ops::GluParams{ops::GluActivation::kSilu, 0.0f, 0.0f};
  const auto n = static_cast<uint32_t>(out.numel());
  KernelLaunch(KernelName("silu_and_mul", "", x.dtype()))
      .input(0, x)
      .output(1, out)
      .bytes(2, GluArgs{n, static_cast<uint32_t>(out.dim(-1)), static_cast<int32_t>(params.activation),
                        params.alpha, params.limit})
      .threads({n, 1, 1}, {kElementwiseThreads, 1, 1});
  return true;
}

}  // namespace

METALRT_REGISTER_OP_PROVIDER("silu_and_mul", DeviceType::kMETAL, ProviderTier::kNative, MetalSiluAndMul);

}  // namespace metalrt::gpu
