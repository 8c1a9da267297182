// Metal dispatch of matmul_bt (out = a . b^T, b [N,K]) and matmul (out = a . b, b [K,N]):
// the decode GEMV for m == 1, the simdgroup-matrix GEMM for every m > 1 (batched decode
// m = 2..16 included: one 32-row tile holds it, and b is read once per tile as in the
// GEMV). Kernels and constants: metal/matmul.metal, metal/matmul_args.h.
#include <cstdint>

#include "gpu/kernel_launch.h"
#include "matmul_args.h"
#include "metalrt/op_registry.h"

namespace metalrt::gpu {
namespace {

uint32_t CeilDiv(int64_t x, int64_t d) { return static_cast<uint32_t>((x + d - 1) / d); }

template <bool kTransposed>
bool MetalMatmul(const OpCall& call) {
  const Tensor& a = call.inputs[0];
  const Tensor& b = call.inputs[1];
  const int64_t m = a.dim(0), k = a.dim(1), n = b.dim(kTransposed ? 0 : 1);
  // The kernels count in int32; element offsets are 64-bit.
  if (!FitsInt(m, n, k)) return false;
  const MatmulArgs args{static_cast<int32_t>(m), static_cast<int32_t>(n), static_cast<int32_t>(k), 0};
  const bool gemv = m == 1;
  KernelLaunch launch(KernelName(kTransposed ? "matmul_bt" : "matmul", gemv ? "gemv" : "gemm", a.dtype()));
  launch.input(0, a).input(1, b).output(2, call.outputs[0]).bytes(3, args);
  if (gemv) {
    launch.threadgroups({CeilDiv(n, kGemvSimdgroups), 1, 1}, {kGemvSimdgroups * kMatmulSimdWidth, 1, 1});
  } else {
    launch.threadgroups({CeilDiv(n, kGemmTile), CeilDiv(m, kGemmTile), 1}, {kGemmThreads, 1, 1});
  }
  return true;
}

}  // namespace

METALRT_REGISTER_PROVIDER("matmul_bt", DeviceType::kMETAL, "metal_matmul_bt", 10, MetalMatmul<true>);
METALRT_REGISTER_PROVIDER("matmul", DeviceType::kMETAL, "metal_matmul", 10, MetalMatmul<false>);

}  // namespace metalrt::gpu
