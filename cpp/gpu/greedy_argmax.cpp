// Metal dispatch of greedy_argmax: one threadgroup per logits row
// (metal/greedy_argmax.metal).
#include "gpu/kernel_launch.h"
#include "gpu/row_grid.h"
#include "metalrt/op_registry.h"
#include "row_args.h"

namespace metalrt::gpu {
namespace {

bool MetalGreedyArgmax(const OpCall& call) {
  const Tensor& logits = call.inputs[0];
  RowGrid grid;
  if (!RowGridOf(logits, &grid)) return false;
  KernelLaunch(KernelName("greedy_argmax", "row", logits.dtype()))
      .input(0, logits)
      .output(1, call.outputs[0])
      .bytes(2, GreedyArgmaxArgs{grid.cols, 0})
      .threadgroups({grid.rows, 1, 1}, {kRowThreads, 1, 1});
  return true;
}

}  // namespace

METALRT_REGISTER_OP_PROVIDER("greedy_argmax", DeviceType::kMETAL, ProviderTier::kNative,
                             MetalGreedyArgmax);

}  // namespace metalrt::gpu
