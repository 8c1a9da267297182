// Metal dispatch of the quantized-weight ops (kernels: metal/quantized.metal): the
// GEMV for m <= kQuantGemvMaxM (8 or, by QuantGemvChunk, 16 values per lane and pass:
// variant gemv or gemv16; any m under DecodeRows, op_registry.h, kQuantGemvMaxM rows a
// GEMV), the tiled GEMM above it, the fused GEMVs
// (quantized_matmul_bt_add / _swiglu), the concatenated GEMV, and one thread per 8-value
// chunk for dequantize and quantized_embedding. Kernel names are
// <op>_<variant>_<format>_<dtype>, the affine format named with its scales' dtype
// ("affine_bf16"). Buffers: activations or ids, data, scales, biases (GGUF binds data
// there too, mxfp4 for its biases: the kernels never read them), out, arguments. Function constants
// (QuantizedConstants, GemvConstants): the affine code width, and a GEMV's m.
#include <algorithm>
#include <cstdint>
#include <string>

#include "gpu/kernel_launch.h"
#include "gpu/quantized_weight_args.h"
#include "metalrt/op_registry.h"
#include "metalrt/ops.h"
#include "metalrt/quantized.h"
#include "ops/quantized_fused.h"
#include "quantized_args.h"

namespace metalrt::gpu {
namespace {

uint32_t CeilDiv(int64_t x, int64_t d) { return static_cast<uint32_t>((x + d - 1) / d); }

// The GEMV kernel <op>_<gemv|gemv16>_<format>_<dtype> over `blocks` blocks of
// kQuantGemvRows rows: args.splits by QuantGemvSplits' rule, then the chunk width by
// QuantGemvChunk's.
std::string GemvKernel(const char* op, QuantizedArgs& args, int64_t blocks, const QuantizedTensor& w,
                       DType dtype, bool data_aligned) {
  args.splits = QuantGemvSplits(blocks, args.k);
  return KernelName(op, GemvVariant(args, data_aligned) + FormatToken(w), dtype);
}

// Launches a GEMV over `blocks` row blocks: kQuantGemvSimdgroups / splits blocks per
// threadgroup.
void LaunchGemv(KernelLaunch& launch, const QuantizedArgs& args, int64_t blocks, int slot) {
  launch.bytes(slot, args).threadgroups({CeilDiv(blocks * args.splits, kQuantGemvSimdgroups), 1, 1},
                                        {kQuantGemvSimdgroups * kQuantSimdWidth, 1, 1});
}

// Binds the weight's tensors at buffers first..first + 2.
KernelLaunch& BindWeight(KernelLaunch& launch, const QuantizedTensor& w, int first = 1) {
  return launch.input(first, w.data).input(first + 1, ScalesOrStandIn(w)).input(first + 2, BiasesOrStandIn(w));
}

bool MetalQuantizedMatmulBT(const OpCall& call) {
  const Tensor& x = call.inputs[0];
  const QuantizedTensor& w = call.param<QuantizedTensor>();
  const int64_t m = x.dim(0);
  if (!FitsInt(m, w.rows, w.cols)) return false;
  const bool aligned = reinterpret_cast<uintptr_t>(x.data()) % (4 * DTypeSize(x.dtype())) == 0;
  if (m > kQuantGemvMaxM && DecodeRows() && aligned) {
    // Decode rows (op_registry.h): kQuantGemvMaxM rows a GEMV, each row the GEMV's bits
    // (x's rows are whole 32-value blocks: every slice keeps the 4-wide alignment).
    for (int64_t r0 = 0; r0 < m; r0 += kQuantGemvMaxM) {
      const int64_t r1 = std::min<int64_t>(m, r0 + kQuantGemvMaxM);
      OpCall rows = call;
      rows.inputs[0] = x.Slice(0, r0, r1);
      rows.outputs[0] = call.outputs[0].Slice(0, r0, r1);
      MetalQuantizedMatmulBT(rows);
    }
    return true;
  }
  const bool gemv = m <= kQuantGemvMaxM;
  // The GEMV reads x with 4-wide vector loads; a view starting off that alignment
  // declines to the reference tier (tensors the runtime allocates are 64-byte aligned).
  if (gemv && !aligned) return false;
  QuantizedArgs args = ArgsOf(w, m);
  const int64_t blocks = CeilDiv(w.rows, kQuantGemvRows);
  KernelLaunch launch(gemv ? GemvKernel("quantized_matmul_bt", args, blocks, w, x.dtype(), WideChunkAligned(w.data))
                           : KernelName("quantized_matmul_bt", "gemm_" + FormatToken(w), x.dtype()),
                      gemv ? GemvConstants(AffineBitsOf(w), m) : QuantizedConstants(AffineBitsOf(w)));
  launch.input(0, x);
  BindWeight(launch, w).output(4, call.outputs[0]);
  if (gemv) {
    LaunchGemv(launch, args, blocks, 5);
  } else {
    launch.bytes(5, args).threadgroups({CeilDiv(w.rows, kQuantGemmTile), CeilDiv(m, kQuantGemmTile), 1},
                                       {kQuantGemmThreads, 1, 1});
  }
  return true;
}

// The fused GEMVs (kernel quantized_matmul_bt_<add|swiglu>_gemv_<format>_<dtype>) for
// m <= kQuantGemvMaxM; above it the composition of the GEMM and the add / silu_and_mul
// dispatches (a prefill's GEMMs dwarf the extra dispatch).
bool MetalQuantizedMatmulBTFused(const OpCall& call, const char* op, bool swiglu) {
  const Tensor& x = call.inputs[0];
  const QuantizedTensor& w = call.param<QuantizedTensor>();
  const int64_t m = x.dim(0);
  if (!FitsInt(m, w.rows, w.cols)) return false;
  if (m > kQuantGemvMaxM || reinterpret_cast<uintptr_t>(x.data()) % (4 * DTypeSize(x.dtype())) != 0)
    return swiglu ? ops::detail::ComposeQuantizedMatmulBTSwiglu(call) : ops::detail::ComposeQuantizedMatmulBTAdd(call);
  QuantizedArgs args = ArgsOf(w, m);
  const int64_t blocks = CeilDiv(swiglu ? w.rows / 2 : w.rows, kQuantGemvRows);
  KernelLaunch launch(GemvKernel(op, args, blocks, w, x.dtype(), WideChunkAligned(w.data)),
                      GemvConstants(AffineBitsOf(w), m));
  launch.input(0, x);
  BindWeight(launch, w).output(4, call.outputs[0]);
  if (!swiglu) launch.input(6, call.inputs[1]);
  LaunchGemv(launch, args, blocks, 5);
  return true;
}

bool MetalQuantizedMatmulBTAdd(const OpCall& call) {
  return MetalQuantizedMatmulBTFused(call, "quantized_matmul_bt_add", false);
}

bool MetalQuantizedMatmulBTSwiglu(const OpCall& call) {
  return MetalQuantizedMatmulBTFused(call, "quantized_matmul_bt_swiglu", true);
}

// quantized_matmul_bt_concat: one GEMV over up to kQuantConcatMaxParts weights (buffers
// 1..3, 6..8, 9..11; a missing third repeats the second with no rows) for m <=
// kQuantGemvMaxM; above it the Metal provider declines (the CPU composition).
const ops::QuantizedGemvRowsRegistrar kConcatRows(DeviceType::kMETAL, kQuantGemvMaxM);

bool MetalQuantizedMatmulBTConcat(const OpCall& call) {
  const Tensor& x = call.inputs[0];
  const auto& weights = call.param<std::vector<QuantizedTensor>>();
  const int64_t m = x.dim(0), n = call.outputs[0].dim(1);
  if (weights.size() > static_cast<size_t>(kQuantConcatMaxParts) || m > kQuantGemvMaxM) return false;
  if (reinterpret_cast<uintptr_t>(x.data()) % (4 * DTypeSize(x.dtype())) != 0) return false;
  QuantizedArgs args = ArgsOf(weights[0], m, n);
  QuantizedConcatArgs parts{};
  int64_t blocks = 0;
  bool aligned = true;
  for (size_t j = 0; j < weights.size(); ++j) {
    // One row stride for every weight: the kernel reads them all with args.row_bytes.
    if (!FitsInt(m, weights[j].rows, weights[j].cols, n) || ArgsOf(weights[j], m, n).row_bytes != args.row_bytes)
      return false;
    parts.rows[j] = static_cast<int32_t>(weights[j].rows);
    blocks += CeilDiv(weights[j].rows, kQuantGemvRows);
    aligned = aligned && WideChunkAligned(weights[j].data);
  }
  KernelLaunch launch(GemvKernel("quantized_matmul_bt_concat", args, blocks, weights[0], x.dtype(), aligned),
                      GemvConstants(AffineBitsOf(weights[0]), m));
  launch.input(0, x);
  BindWeight(launch, weights[0]).output(4, call.outputs[0]);
  BindWeight(launch, weights[1], 6);
  BindWeight(launch, weights.back(), 9).bytes(12, parts);
  LaunchGemv(launch, args, blocks, 5);
  return true;
}

// dequantize (ids undefined: row y is weight row y) and quantized_embedding.
bool LaunchRows(const char* op, const char* variant, const Tensor& ids, const QuantizedTensor& w,
                const Tensor& out, int64_t rows) {
  if (!FitsInt(w.rows, w.cols) || !FitsUint(rows)) return false;
  KernelLaunch launch(KernelName(op, std::string(variant) + "_" + FormatToken(w), out.dtype()),
                      QuantizedConstants(AffineBitsOf(w)));
  launch.input(0, ids.defined() ? ids : w.data);
  BindWeight(launch, w).output(4, out).bytes(5, ArgsOf(w, rows));
  launch.threads({CeilDiv(w.cols, kQuantChunk), static_cast<uint32_t>(rows), 1}, {kQuantGatherThreads, 1, 1});
  return true;
}

bool MetalDequantize(const OpCall& call) {
  const QuantizedTensor& w = call.param<QuantizedTensor>();
  return LaunchRows("dequantize", "rows", Tensor(), w, call.outputs[0], w.rows);
}

bool MetalQuantizedEmbedding(const OpCall& call) {
  const Tensor& ids = call.inputs[0];
  return LaunchRows("quantized_embedding", "gather", ids, call.param<QuantizedTensor>(), call.outputs[0],
                    ids.dim(0));
}

}  // namespace

METALRT_REGISTER_OP_PROVIDER("quantized_matmul_bt", DeviceType::kMETAL, ProviderTier::kNative,
                             MetalQuantizedMatmulBT);
METALRT_REGISTER_OP_PROVIDER("quantized_matmul_bt_add", DeviceType::kMETAL, ProviderTier::kNative,
                             MetalQuantizedMatmulBTAdd);
METALRT_REGISTER_OP_PROVIDER("quantized_matmul_bt_swiglu", DeviceType::kMETAL, ProviderTier::kNative,
                             MetalQuantizedMatmulBTSwiglu);
METALRT_REGISTER_OP_PROVIDER("quantized_matmul_bt_concat", DeviceType::kMETAL, ProviderTier::kNative,
                             MetalQuantizedMatmulBTConcat);
METALRT_REGISTER_OP_PROVIDER("dequantize", DeviceType::kMETAL, ProviderTier::kNative, MetalDequantize);
METALRT_REGISTER_OP_PROVIDER("quantized_embedding", DeviceType::kMETAL, ProviderTier::kNative,
                             MetalQuantizedEmbedding);

}  // namespace metalrt::gpu
