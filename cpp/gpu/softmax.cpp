// Metal dispatch of softmax: one threadgroup per row (metal/softmax.metal).
#include "gpu/kernel_launch.h"
#include "gpu/row_grid.h"
#include "metalrt/op_registry.h"
#include "row_args.h"

namespace metalrt::gpu {
namespace {

bool MetalSoftmax(const OpCall& call) {
  const Tensor& x = call.inputs[0];
  RowGrid grid;
  if (!RowGridOf(x, &grid)) return false;
  KernelLaunch(KernelName("softmax", "row", x.dtype()))
      .input(0, x)
      .output(1, call.outputs[0])
      .bytes(2, SoftmaxArgs{grid.cols, 0})
      .threadgroups({grid.rows, 1, 1}, {kRowThreads, 1, 1});
  return true;
}

}  // namespace

METALRT_REGISTER_OP_PROVIDER("softmax", DeviceType::kMETAL, ProviderTier::kNative, MetalSoftmax);

}  // namespace metalrt::gpu
