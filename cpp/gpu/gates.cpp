// Metal dispatch of the gate ops (kernels: metal/gates.metal): gated_rms_norm one
// threadgroup per row, gated_query_split one thread per (query element, token),
// sigmoid_mul one thread per element. Shapes beyond the kernels' index types decline.
#include <cstdint>

#include "elementwise_args.h"
#include "gpu/kernel_launch.h"
#include "gpu/row_grid.h"
#include "metalrt/op_registry.h"
#include "metalrt/ops.h"
#include "moe_args.h"
#include "row_args.h"

namespace metalrt::gpu {
namespace {

bool MetalGatedRmsNorm(const OpCall& call) {
  const Tensor& x = call.inputs[0];
  RowGrid grid;
  if (!RowGridOf(x, &grid)) return false;
  KernelLaunch(KernelName("gated_rms_norm", "row", x.dtype()))
      .input(0, x)
      .input(1, call.inputs[1])
      .input(2, call.inputs[2])
      .output(3, call.outputs[0])
      .bytes(4, RmsNormArgs{grid.cols, call.param<ops::GatedRmsNormParams>().eps})
      .threadgroups({grid.rows, 1, 1}, {kRowThreads, 1, 1});
  return true;
}

bool MetalGatedQuerySplit(const OpCall& call) {
  const Tensor& q_gate = call.inputs[0];
  const auto& p = call.param<ops::GatedQuerySplitParams>();
  if (!FitsInt(q_gate.dim(1)) || !FitsUint(q_gate.dim(0))) return false;
  const auto width = static_cast<uint32_t>(p.num_heads * p.head_dim);
  KernelLaunch(KernelName("gated_query_split", "", q_gate.dtype()))
      .input(0, q_gate)
      .output(1, call.outputs[0])
      .output(2, call.outputs[1])
      .bytes(3, GatedQuerySplitArgs{static_cast<int32_t>(p.num_heads), static_cast<int32_t>(p.head_dim)})
      .threads({width, static_cast<uint32_t>(q_gate.dim(0)), 1}, {kMoeThreads, 1, 1});
  return true;
}

bool MetalSigmoidMul(const OpCall& call) {
  const Tensor& x = call.inputs[0];
  if (!FitsUint(x.numel())) return false;
  const auto n = static_cast<uint32_t>(x.numel());
  KernelLaunch(KernelName("sigmoid_mul", "", x.dtype()))
      .input(0, x)
      .input(1, call.inputs[1])
      .output(2, call.outputs[0])
      .bytes(3, ElementwiseArgs{n, n})
      .threads({n, 1, 1}, {kElementwiseThreads, 1, 1});
  return true;
}

}  // namespace

METALRT_REGISTER_OP_PROVIDER("gated_rms_norm", DeviceType::kMETAL, ProviderTier::kNative, MetalGatedRmsNorm);
METALRT_REGISTER_OP_PROVIDER("gated_query_split", DeviceType::kMETAL, ProviderTier::kNative,
                             MetalGatedQuerySplit);
METALRT_REGISTER_OP_PROVIDER("sigmoid_mul", DeviceType::kMETAL, ProviderTier::kNative, MetalSigmoidMul);

}  // namespace metalrt::gpu
