// CPU q/k-norm + RoPE: by definition the composite rms_norm (over head_dim, rounded to
// the output dtype) followed by rope_neox in place. A fused kernel on another device
// is gated against exactly this.
#include "metalrt/op_registry.h"
#include "metalrt/ops.h"

namespace metalrt::cpu {
namespace {

bool QkNormRope(const OpCall& call) {
  const auto& p = call.param<ops::QkNormRopeParams>();
  const Tensor& positions = call.inputs[4];
  for (int i = 0; i < 2; ++i) {   // i = 0: q with q_weight, i = 1: k with k_weight
    const Tensor& out = call.outputs[i];
    ops::RmsNorm(call.inputs[i], call.inputs[2 + i], p.eps, out);
    ops::RopeNeox(out, positions, p.rotary_dim, p.base, out);
  }
  return true;
}

METALRT_REGISTER_OP_PROVIDER("qk_norm_rope", DeviceType::kCPU, ProviderTier::kOracle, QkNormRope);

}  // namespace
}  // namespace metalrt::cpu
