// Metal dispatch of the MoE ops: moe_router (metal/moe_router.metal, one threadgroup per
// token), moe_matmul_bt (metal/moe_matmul.metal: the GEMV over (row block, (token,
// slot) pair) for up to kQuantGemvMaxM tokens; above, the pairs grouped by expert on
// the device, then the GEMM per expert tile — the ids stay on the device, the host never
// reads them, so no wait; gated: the gate and up stacks as two operands, the grid's x
// doubled) and moe_combine (metal/moe_combine.metal, one thread per
// output element). Shapes beyond the kernels' index types decline.
#include <algorithm>
#include <cstdint>
#include <string>

#include "gpu/kernel_launch.h"
#include "gpu/quantized_weight_args.h"
#include "metalrt/op_registry.h"
#include "metalrt/ops.h"
#include "moe_args.h"
#include "quantized_args.h"
#include "row_args.h"

namespace metalrt::gpu {
namespace {

uint32_t CeilDiv(int64_t x, int64_t d) { return static_cast<uint32_t>((x + d - 1) / d); }

bool MetalMoeRouter(const OpCall& call) {
  const Tensor& logits = call.inputs[0];
  const auto& p = call.param<ops::MoeRouterParams>();
  if (!FitsInt(logits.dim(1)) || !FitsUint(logits.dim(0))) return false;
  KernelLaunch(KernelName("moe_router", "row", logits.dtype()))
      .input(0, logits)
      .output(1, call.outputs[0])
      .output(2, call.outputs[1])
      .bytes(3, MoeRouterArgs{static_cast<int32_t>(logits.dim(1)), static_cast<int32_t>(p.top_k),
                              p.renormalize ? 1 : 0, 0})
      .threadgroups({static_cast<uint32_t>(logits.dim(0)), 1, 1}, {kRowThreads, 1, 1});
  return true;
}

// The weight's QuantizedArgs with n = N rows per expert (float weights: row_bytes only).
QuantizedArgs ExpertArgs(const OpCall& call, int64_t n) {
  const auto& p = call.param<ops::MoeMatmulParams>();
  if (p.quantized) return ArgsOf(p.w, 1, n);
  const Tensor& w = call.inputs[2];
  QuantizedArgs args{};
  args.row_bytes = static_cast<int64_t>(w.dim(1) * DTypeSize(w.dtype()));
  args.m = 1;
  args.n = static_cast<int32_t>(n);
  args.k = static_cast<int32_t>(w.dim(1));
  args.splits = 1;   // the pairs fill the grid: no K split
  return args;
}

bool MetalMoeMatmulBT(const OpCall& call) {
  const Tensor& x = call.inputs[0];
  const Tensor& ids = call.inputs[1];
  const auto& p = call.param<ops::MoeMatmulParams>();
  const Tensor& out = call.outputs[0];
  const int64_t stacks = p.gated ? 2 : 1;
  const int64_t k = x.dim(-1), n = out.dim(2) / stacks, tokens = ids.dim(0), pairs = ids.numel();
  const int64_t rows = p.quantized ? p.w.rows : call.inputs[2].dim(0);
  const int64_t max_tiles = (pairs + kQuantGemmTile - 1) / kQuantGemmTile + std::min(p.num_experts, pairs);
  if (!FitsInt(rows, k, pairs, 3 * max_tiles) || !FitsUint(pairs)) return false;
  // Batches beyond the GEMV's rows group the pairs by expert for the GEMM (K in whole
  // GEMM steps: every quantized K; float K % 32 == 0, else the GEMV serves them too).
  // The GEMV reads x in 8-value chunks with 4-wide vector loads: float weights need
  // K % 8 == 0 (quantized K is a multiple of 32) and x aligned for the loads. Under
  // DecodeRows (op_registry.h) it serves every batch it can read: a pair's bits then do
  // not depend on the batch.
  const bool gemv_reads = k % kQuantChunk == 0 && reinterpret_cast<uintptr_t>(x.data()) % (4 * DTypeSize(x.dtype())) == 0;
  const bool grouped = tokens > kQuantGemvMaxM && k % kQuantGemmTileK == 0 &&
                       p.num_experts <= kMoeGroupMaxExperts && !(DecodeRows() && gemv_reads);
  if (!grouped && !gemv_reads) return false;
  const std::string format = p.quantized ? FormatToken(p.w) : "float";
  const Tensor& data = call.inputs[2];
  // The up stack's tensors, or stand-ins the kernel does not read.
  const Tensor& up_data = !p.gated ? data : p.quantized ? p.up.data : call.inputs[3];
  const bool up_own = p.gated && p.quantized;
  const MoeMatmulArgs moe{static_cast<int32_t>(p.num_experts), static_cast<int32_t>(ids.dim(1)),
                          x.ndim() == 3 ? 1 : 0, static_cast<int32_t>(stacks)};
  Tensor order, tiles;   // the grouping, device scratch (from the buffer cache after warm-up)
  if (grouped) {
    order = Tensor::Empty({pairs}, DType::kI32, DeviceType::kMETAL);
    tiles = Tensor::Empty({3 * max_tiles}, DType::kI32, DeviceType::kMETAL);
    KernelLaunch(KernelName("moe_group_pairs", "", x.dtype()))
        .input(0, ids)
        .output(1, order)
        .output(2, tiles)
        .output(3, out)
        .bytes(4, MoeGroupArgs{moe.experts, static_cast<int32_t>(pairs), static_cast<int32_t>(max_tiles),
                               static_cast<int32_t>(stacks * n)})
        .threadgroups({1, 1, 1}, {kMoeThreads, 1, 1});
  }
  const QuantizedArgs args = ExpertArgs(call, n);
  const std::string variant = grouped ? "gemm_" : GemvVariant(args, WideChunkAligned(data) && WideChunkAligned(up_data));
  // The GEMV takes one (token, slot) pair's row per threadgroup: m = 1.
  const int32_t bits = p.quantized ? AffineBitsOf(p.w) : 0;
  KernelLaunch launch(KernelName("moe_matmul_bt", variant + format, x.dtype()),
                      grouped ? QuantizedConstants(bits) : GemvConstants(bits, 1));
  launch.input(0, x)
      .input(1, grouped ? order : ids)
      .input(2, data)
      .input(3, p.quantized ? ScalesOrStandIn(p.w) : data)   // stand-ins where the format has none
      .input(4, p.quantized ? BiasesOrStandIn(p.w) : data)
      .output(5, out)
      .bytes(6, args)
      .bytes(7, moe)
      .input(9, up_data)
      .input(10, up_own ? ScalesOrStandIn(p.up) : up_data)
      .input(11, up_own ? BiasesOrStandIn(p.up) : up_data);
  const uint32_t groups = static_cast<uint32_t>(stacks);
  if (grouped) {
    launch.input(8, tiles).threadgroups(
        {groups * CeilDiv(n, kQuantGemmTile), static_cast<uint32_t>(max_tiles), 1}, {kQuantGemmThreads, 1, 1});
  } else {
    launch.threadgroups(
        {groups * CeilDiv(n, kQuantGemvRows * kQuantGemvSimdgroups), static_cast<uint32_t>(pairs), 1},
        {kQuantGemvSimdgroups * kQuantSimdWidth, 1, 1});
  }
  return true;
}

bool MetalMoeCombine(const OpCall& call) {
  const Tensor& y = call.inputs[0];
  const Tensor& shared = call.inputs[2];
  const Tensor& shared_gate = call.inputs[3];
  const int64_t tokens = y.dim(0), slots = y.dim(1), n = y.dim(2);
  if (!FitsInt(tokens * slots * n) || !FitsUint(n, tokens)) return false;
  const int32_t mode = !shared.defined() ? 0 : shared_gate.defined() ? 2 : 1;
  KernelLaunch(KernelName("moe_combine", "", y.dtype()))
      .input(0, y)
      .input(1, call.inputs[1])
      .input(2, shared.defined() ? shared : y)   // stand-ins the kernel does not read
      .input(3, shared_gate.defined() ? shared_gate : y)
      .output(4, call.outputs[0])
      .bytes(5, MoeCombineArgs{static_cast<int32_t>(tokens), static_cast<int32_t>(slots),
                               static_cast<int32_t>(n), mode})
      .threads({static_cast<uint32_t>(n), static_cast<uint32_t>(tokens), 1}, {kMoeThreads, 1, 1});
  return true;
}

}  // namespace

METALRT_REGISTER_OP_PROVIDER("moe_router", DeviceType::kMETAL, ProviderTier::kNative, MetalMoeRouter);
METALRT_REGISTER_OP_PROVIDER("moe_matmul_bt", DeviceType::kMETAL, ProviderTier::kNative, MetalMoeMatmulBT);
METALRT_REGISTER_OP_PROVIDER("moe_combine", DeviceType::kMETAL, ProviderTier::kNative, MetalMoeCombine);

}  // namespace metalrt::gpu
