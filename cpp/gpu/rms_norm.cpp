// Metal dispatch of rms_norm: one threadgroup per row (metal/rms_norm.metal).
#include "gpu/kernel_launch.h"
#include "gpu/row_grid.h"
#include "metalrt/op_registry.h"
#include "metalrt/ops.h"
#include "row_args.h"

namespace metalrt::gpu {
namespace {

bool MetalRmsNorm(const OpCall& call) {
  const Tensor& x = call.inputs[0];
  const auto& p = call.param<ops::NormParams>();
  RowGrid grid;
  if (!RowGridOf(x, &grid)) return false;
  KernelLaunch(KernelName("rms_norm", "row", x.dtype()))
      .input(0, x)
      .input(1, call.inputs[1])
      .output(2, call.outputs[0])
      .bytes(3, RmsNormArgs{grid.cols, p.eps})
      .threadgroups({grid.rows, 1, 1}, {kRowThreads, 1, 1});
  return true;
}

}  // namespace

METALRT_REGISTER_OP_PROVIDER("rms_norm", DeviceType::kMETAL, ProviderTier::kNative, MetalRmsNorm);

}  // namespace metalrt::gpu
