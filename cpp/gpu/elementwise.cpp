// Metal dispatch of the elementwise ops add, mul, relu and gelu:
// one thread per output element (metal/elementwise.metal). The shapes were validated by
// the entry points (cpp/ops); a tensor too large for the kernels' uint32 index declines.
#include <cstdint>

#include "elementwise_args.h"
#include "gpu/kernel_launch.h"
#include "metalrt/op_registry.h"

namespace metalrt::gpu {
namespace {

void Launch(KernelLaunch& launch, uint32_t n) {
  launch.threads({n, 1, 1}, {kElementwiseThreads, 1, 1});
}

template <const char* kOp>
bool Binary(const OpCall& call) {
  const Tensor& a = call.inputs[0];
  const Tensor& b = call.inputs[1];
  if (!FitsUint(a.numel())) return false;
  const auto n = static_cast<uint32_t>(a.numel());
  KernelLaunch launch(KernelName(kOp, "", a.dtype()));
  launch.input(0, a).input(1, b).output(2, call.outputs[0])
      .bytes(3, ElementwiseArgs{n, static_cast<uint32_t>(b.numel())});
  Launch(launch, n);
  return true;
}

template <const char* kOp>
bool Unary(const OpCall& call) {
  const Tensor& x = call.inputs[0];
  if (!FitsUint(x.numel())) return false;
  const auto n = static_cast<uint32_t>(x.numel());
  KernelLaunch launch(KernelName(kOp, "", x.dtype()));
  launch.input(0, x).output(1, call.outputs[0]).bytes(2, ElementwiseArgs{n, 0});
  Launch(launch, n);
  return true;
}

constexpr char kAdd[] = "add";
constexpr char kMul[] = "mul";
constexpr char kRelu[] = "relu";
constexpr char kGelu[] = "gelu";

}  // namespace

METALRT_REGISTER_OP_PROVIDER("add", DeviceType::kMETAL, ProviderTier::kNative, Binary<kAdd>);
METALRT_REGISTER_OP_PROVIDER("mul", DeviceType::kMETAL, ProviderTier::kNative, Binary<kMul>);
METALRT_REGISTER_OP_PROVIDER("relu", DeviceType::kMETAL, ProviderTier::kNative, Unary<kRelu>);
METALRT_REGISTER_OP_PROVIDER("gelu", DeviceType::kMETAL, ProviderTier::kNative, Unary<kGelu>);

}  // namespace metalrt::gpu
