// Metal dispatch of layer_norm: one threadgroup per row (metal/layer_norm.metal).
#include "gpu/kernel_launch.h"
#include "gpu/row_grid.h"
#include "metalrt/op_registry.h"
#include "metalrt/ops.h"
#include "row_args.h"

namespace metalrt::gpu {
namespace {

bool MetalLayerNorm(const OpCall& call) {
  const Tensor& x = call.inputs[0];
  const Tensor& weight = call.inputs[1];
  const Tensor& bias = call.inputs[2];
  const auto& p = call.param<ops::NormParams>();
  RowGrid grid;
  if (!RowGridOf(x, &grid)) return false;
  // Without a bias the weight stands in at buffer(2); the kernel never reads it.
  KernelLaunch(KernelName("layer_norm", "row", x.dtype()))
      .input(0, x)
      .input(1, weight)
      .input(2, bias.defined() ? bias : weight)
      .output(3, call.outputs[0])
      .bytes(4, LayerNormArgs{grid.cols, p.eps, bias.defined() ? 1 : 0, 0})
      .threadgroups({grid.rows, 1, 1}, {kRowThreads, 1, 1});
  return true;
}

}  // namespace

METALRT_REGISTER_OP_PROVIDER("layer_norm", DeviceType::kMETAL, ProviderTier::kNative, MetalLayerNorm);

}  // namespace metalrt::gpu
