// Metal dispatch of qk_norm_rope: the fused kernel (metal/qk_norm_rope.metal) normalises
// and rotates q and k in one dispatch, one threadgroup per (head row, token).
#include <cstdint>

#include "gpu/kernel_launch.h"
#include "gpu/rope_frequencies.h"
#include "metalrt/op_registry.h"
#include "metalrt/ops.h"
#include "rope_args.h"
#include "row_args.h"

namespace metalrt::gpu {
namespace {

bool MetalQkNormRope(const OpCall& call) {
  const Tensor& q = call.inputs[0];
  const Tensor& k = call.inputs[1];
  const auto& p = call.param<ops::QkNormRopeParams>();
  const int64_t rows = q.dim(1) + k.dim(1);
  if (!RopeKernelsServe(p.rotary_dim) || !FitsInt(rows * q.dim(2)) ||
      !FitsUint(q.dim(0)))
    return false;
  const std::vector<float> freq = RopeTurnFrequencies(p.rotary_dim, p.base);
  KernelLaunch(KernelName("qk_norm_rope", "fused", q.dtype()))
      .input(0, q)
      .input(1, k)
      .input(2, call.inputs[2])
      .input(3, call.inputs[3])
      .input(4, call.inputs[4])
      .bytes(5, freq.data(), freq.size() * sizeof(float))
      .output(6, call.outputs[0])
      .output(7, call.outputs[1])
      .bytes(8, QkNormRopeArgs{static_cast<int32_t>(q.dim(1)), static_cast<int32_t>(k.dim(1)),
                               static_cast<int32_t>(q.dim(2)), static_cast<int32_t>(p.rotary_dim),
                               p.eps, 0})
      .threadgroups({static_cast<uint32_t>(rows), static_cast<uint32_t>(q.dim(0)), 1},
                    {kRowThreads, 1, 1});
  return true;
}

}  // namespace

METALRT_REGISTER_OP_PROVIDER("qk_norm_rope", DeviceType::kMETAL, ProviderTier::kNative,
                             MetalQkNormRope);

}  // namespace metalrt::gpu
