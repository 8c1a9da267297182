// Metal dispatch of gdn_gating (metal/gdn_gating.metal): one thread per (token, head),
// kernel gdn_gating_<a's dtype>_<A_log's dtype>.
#include <string>

#include "gpu/kernel_launch.h"
#include "linear_attention_args.h"
#include "metalrt/op_registry.h"

namespace metalrt::gpu {
namespace {

bool MetalGdnGating(const OpCall& call) {
  const Tensor& a = call.inputs[0];
  if (!FitsInt(a.numel())) return false;
  const std::string name = KernelName("gdn_gating", KernelDTypeSuffix(a.dtype()), call.inputs[2].dtype());
  KernelLaunch kernel(name);
  for (uint32_t i = 0; i < 4; ++i) kernel.input(i, call.inputs[i]);
  kernel.output(4, call.outputs[0])
      .output(5, call.outputs[1])
      .bytes(6, GdnGatingArgs{static_cast<int32_t>(a.dim(1)), static_cast<int32_t>(a.numel())})
      .threads({static_cast<uint32_t>(a.numel()), 1, 1}, {kGatingThreads, 1, 1});
  return true;
}

}  // namespace

METALRT_REGISTER_OP_PROVIDER("gdn_gating", DeviceType::kMETAL, ProviderTier::kNative, MetalGdnGating);

}  // namespace metalrt::gpu
