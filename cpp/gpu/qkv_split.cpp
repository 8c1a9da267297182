// Metal dispatch of qkv_split: one thread per qkv element on a (q + k + v, tokens) grid
// (metal/qkv_split.metal). Shapes beyond the kernel's index types decline.
#include <cstdint>

#include "gpu/kernel_launch.h"
#include "metalrt/op_registry.h"
#include "metalrt/ops.h"
#include "qkv_split_args.h"

namespace metalrt::gpu {
namespace {

bool MetalQkvSplit(const OpCall& call) {
  const Tensor& qkv = call.inputs[0];
  const auto& p = call.param<ops::QkvSplitParams>();
  const int64_t width = qkv.dim(1);
  if (!FitsInt(width) || !FitsUint(qkv.dim(0)))
    return false;
  KernelLaunch(KernelName("qkv_split", "", qkv.dtype()))
      .input(0, qkv)
      .output(1, call.outputs[0])
      .output(2, call.outputs[1])
      .output(3, call.outputs[2])
      .bytes(4, QkvSplitArgs{static_cast<int32_t>(p.q_width), static_cast<int32_t>(p.k_width),
                             static_cast<int32_t>(p.v_width), 0})
      .threads({static_cast<uint32_t>(width), static_cast<uint32_t>(qkv.dim(0)), 1},
               {kQkvSplitThreads, 1, 1});
  return true;
}

}  // namespace

METALRT_REGISTER_OP_PROVIDER("qkv_split", DeviceType::kMETAL, ProviderTier::kNative, MetalQkvSplit);

}  // namespace metalrt::gpu
