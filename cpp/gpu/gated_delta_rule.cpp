// Metal dispatch of gated_delta_rule (metal/gated_delta_rule.metal): a threadgroup per
// (request, value head) in each kernel it encodes. From query_start (host-written,
// validated by the entry point) and the mode, the host encodes the recurrent kernel when
// it serves some request and the chunked kernel likewise; each skips the requests of
// the other, so a decode batch under "auto" dispatches the recurrent kernel only.
// Heads wider than kDeltaMaxHeadDim (Dk) or kDeltaThreads (Dv) are declined (the CPU
// reference tier serves them).
#include <cstdint>

#include "gpu/kernel_launch.h"
#include "gpu/op_capture.h"
#include "linear_attention_args.h"
#include "metalrt/linear_attention_ops.h"
#include "metalrt/op_registry.h"

namespace metalrt::gpu {
namespace {

static_assert(kDeltaChunk == ops::kDeltaRuleChunk, "the kernel's chunk is the op's");

// The mode the kernels run: under DecodeRows (op_registry.h) "auto" steps every token
// recurrently, as one-token steps.
ops::DeltaRuleMode KernelMode(const ops::GatedDeltaRuleParams& p) {
  return p.mode == ops::DeltaRuleMode::kAuto && DecodeRows() ? ops::DeltaRuleMode::kRecurrent : p.mode;
}

// {some request runs the recurrent kernel, some the chunked one, the kernels' mode}, from
// the host-written query_start, the mode and the decode-rows setting (a plan's capture
// is keyed by it: op_capture.h).
HostKey DeltaRuleVariants(const OpCall& call) {
  const ops::DeltaRuleMode mode = KernelMode(call.param<ops::GatedDeltaRuleParams>());
  const int32_t* starts = call.inputs[4].data_as<int32_t>();
  HostKey variants{0, 0, static_cast<int64_t>(mode)};
  for (int64_t r = 0; r < call.inputs[5].dim(0); ++r) {
    const int64_t len = starts[r + 1] - starts[r];
    if (len == 0) continue;
    const bool as_chunks = mode == ops::DeltaRuleMode::kChunked ||
                           (mode == ops::DeltaRuleMode::kAuto && len > 1);
    variants[as_chunks ? 1 : 0] = 1;
  }
  return variants;
}

bool MetalGatedDeltaRule(const OpCall& call) {
  const auto& p = call.param<ops::GatedDeltaRuleParams>();
  if (p.head_k_dim > kDeltaMaxHeadDim || p.head_v_dim > kDeltaThreads) return false;
  const Tensor& qkv = call.inputs[0];
  const int64_t requests = call.inputs[5].dim(0);
  if (!FitsInt(qkv.numel(), p.num_v_heads, requests) || !FitsInt(call.inputs[3].numel())) return false;
  const HostKey variants = DeltaRuleVariants(call);
  KeyCapture(&DeltaRuleVariants, variants);
  const bool recurrent = variants[0] != 0, chunked = variants[1] != 0;
  const ops::DeltaRuleMode mode = KernelMode(p);
  const GatedDeltaRuleArgs args{static_cast<int32_t>(p.num_k_heads), static_cast<int32_t>(p.num_v_heads),
                                static_cast<int32_t>(p.head_v_dim), p.scale, static_cast<int32_t>(mode),
                                p.v_heads_tiled ? 1 : 0, {0, 0}};
  // One pipeline per head_k_dim (a model has one): its loops unroll (kernel header).
  const FunctionConstants constants = {Constant(kDeltaHeadKDimConstant, static_cast<int32_t>(p.head_k_dim))};
  auto launch = [&](const char* variant) {
    KernelLaunch kernel(KernelName("gated_delta_rule", variant, qkv.dtype()), constants);
    // The state pool (3) is updated in place.
    for (uint32_t i = 0; i < 6; ++i) i == 3 ? kernel.output(i, call.inputs[i]) : kernel.input(i, call.inputs[i]);
    kernel.output(6, call.outputs[0]).bytes(7, args);
    kernel.threadgroups({static_cast<uint32_t>(requests), static_cast<uint32_t>(p.num_v_heads), 1},
                        {static_cast<uint32_t>(kDeltaThreads), 1, 1});
  };
  if (recurrent) launch("recurrent");
  if (chunked) launch("chunked");
  return true;
}

}  // namespace

METALRT_REGISTER_OP_PROVIDER("gated_delta_rule", DeviceType::kMETAL, ProviderTier::kNative,
                             MetalGatedDeltaRule);

}  // namespace metalrt::gpu
