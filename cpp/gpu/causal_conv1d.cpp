// Metal dispatch of causal_conv1d (metal/causal_conv1d.metal): one thread per (channel,
// request). From query_start (host-written, validated by the entry point) the host
// encodes the decode variant when some request has one token and the prefill variant
// when some has more; each serves only its own requests, so a decode batch dispatches
// the decode kernel only.
#include <cstdint>

#include "gpu/kernel_launch.h"
#include "gpu/op_capture.h"
#include "linear_attention_args.h"
#include "metalrt/linear_attention_ops.h"
#include "metalrt/op_registry.h"

namespace metalrt::gpu {
namespace {

// {some request has one token, some has more}: the variants encoded, from the
// host-written query_start (a plan's capture is keyed by it: op_capture.h).
HostKey ConvVariants(const OpCall& call) {
  const int32_t* starts = call.inputs[3].data_as<int32_t>();
  HostKey variants{0, 0, 0};
  for (int64_t r = 0; r < call.inputs[4].dim(0); ++r) {
    variants[0] |= starts[r + 1] - starts[r] == 1;
    variants[1] |= starts[r + 1] - starts[r] > 1;
  }
  return variants;
}

bool MetalCausalConv1d(const OpCall& call) {
  const Tensor& x = call.inputs[0];
  const Tensor& weight = call.inputs[1];
  const int64_t channels = x.dim(1), requests = call.inputs[4].dim(0);
  if (!FitsInt(channels, weight.dim(1), requests, x.numel())) return false;
  const HostKey variants = ConvVariants(call);
  KeyCapture(&ConvVariants, variants);
  const bool decode = variants[0] != 0, prefill = variants[1] != 0;
  const CausalConv1dArgs args{static_cast<int32_t>(channels), static_cast<int32_t>(weight.dim(1)),
                              static_cast<int32_t>(requests),
                              call.param<ops::CausalConv1dParams>().silu ? 1 : 0};
  auto launch = [&](const char* variant) {
    KernelLaunch kernel(KernelName("causal_conv1d", variant, x.dtype()));
    // conv_state (2) is updated in place.
    for (uint32_t i = 0; i < 5; ++i) i == 2 ? kernel.output(i, call.inputs[i]) : kernel.input(i, call.inputs[i]);
    kernel.output(5, call.outputs[0]).bytes(6, args);
    kernel.threads({static_cast<uint32_t>(channels), static_cast<uint32_t>(requests), 1},
                   {kConvThreads, 1, 1});
  };
  if (decode) launch("decode");
  if (prefill) launch("prefill");
  return true;
}

}  // namespace

METALRT_REGISTER_OP_PROVIDER("causal_conv1d", DeviceType::kMETAL, ProviderTier::kNative,
                             MetalCausalConv1d);

}  // namespace metalrt::gpu
