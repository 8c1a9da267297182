// Metal dispatch of matmul_bt (out = a . b^T, b [N,K]) and matmul (out = a . b, b [K,N]).
// matmul_bt: the multi-vector GEMV for m <= kGemvMaxM (any m under DecodeRows,
// op_registry.h: kGemvMaxM rows a launch) (K split over SIMD-groups by
// GemvSplits' rule: matmul_bt_gemv_splitk), the simdgroup-matrix GEMM above it and for
// any K % kGemvChunk != 0 or a or b not aligned for the GEMV's 4-wide loads (the GEMM
// takes every shape). matmul: the column GEMV for m == 1, the GEMM above. Kernels and
// constants: metal/matmul.metal, metal/matmul_args.h.
#include <algorithm>
#include <cstdint>

#include "gpu/kernel_launch.h"
#include "matmul_args.h"
#include "metalrt/op_registry.h"

namespace metalrt::gpu {
namespace {

uint32_t CeilDiv(int64_t x, int64_t d) { return static_cast<uint32_t>((x + d - 1) / d); }

bool AlignedForGemv(const Tensor& t) {
  return reinterpret_cast<uintptr_t>(t.data()) % (4 * DTypeSize(t.dtype())) == 0;
}

// out [m, n] = a [m, k] . b^T on the multi-vector GEMV (m <= kGemvMaxM).
void LaunchMatmulBtGemv(const Tensor& a, const Tensor& b, const Tensor& out) {
  const int64_t n = b.dim(0), k = a.dim(1);
  MatmulArgs args{static_cast<int32_t>(a.dim(0)), static_cast<int32_t>(n), static_cast<int32_t>(k),
                  GemvSplits(n, k)};
  KernelLaunch launch(KernelName("matmul_bt", args.splits > 1 ? "gemv_splitk" : "gemv", a.dtype()));
  launch.input(0, a).input(1, b).output(2, out).bytes(3, args);
  launch.threadgroups({CeilDiv(n * args.splits, kGemvSimdgroups * kGemvRows), 1, 1},
                      {kGemvSimdgroups * kMatmulSimdWidth, 1, 1});
}

template <bool kTransposed>
bool MetalMatmul(const OpCall& call) {
  const Tensor& a = call.inputs[0];
  const Tensor& b = call.inputs[1];
  const int64_t m = a.dim(0), k = a.dim(1), n = b.dim(kTransposed ? 0 : 1);
  // The kernels count in int32; element offsets are 64-bit.
  if (!FitsInt(m, n, k)) return false;
  MatmulArgs args{static_cast<int32_t>(m), static_cast<int32_t>(n), static_cast<int32_t>(k), 1};
  const char* op = kTransposed ? "matmul_bt" : "matmul";
  if (kTransposed && k % kGemvChunk == 0 && AlignedForGemv(a) && AlignedForGemv(b) &&
      (m <= kGemvMaxM || DecodeRows())) {
    // Decode rows (op_registry.h): kGemvMaxM rows a launch, each row the GEMV's bits.
    for (int64_t r0 = 0; r0 < m; r0 += kGemvMaxM) {
      const int64_t r1 = std::min<int64_t>(m, r0 + kGemvMaxM);
      LaunchMatmulBtGemv(a.Slice(0, r0, r1), b, call.outputs[0].Slice(0, r0, r1));
    }
    return true;
  }
  const bool gemv = !kTransposed && m == 1;
  KernelLaunch launch(KernelName(op, gemv ? "gemv" : "gemm", a.dtype()));
  launch.input(0, a).input(1, b).output(2, call.outputs[0]).bytes(3, args);
  if (gemv) {
    launch.threadgroups({CeilDiv(n, kGemvSimdgroups), 1, 1}, {kGemvSimdgroups * kMatmulSimdWidth, 1, 1});
  } else {
    launch.threadgroups({CeilDiv(n, kGemmTile), CeilDiv(m, kGemmTile), 1}, {kGemmThreads, 1, 1});
  }
  return true;
}

}  // namespace

METALRT_REGISTER_OP_PROVIDER("matmul_bt", DeviceType::kMETAL, ProviderTier::kNative, MetalMatmul<true>);
METALRT_REGISTER_OP_PROVIDER("matmul", DeviceType::kMETAL, ProviderTier::kNative, MetalMatmul<false>);

}  // namespace metalrt::gpu
