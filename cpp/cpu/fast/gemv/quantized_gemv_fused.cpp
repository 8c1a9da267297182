// The fast CPU providers of the fused quantized GEMVs a decode step runs:
// quantized_matmul_bt_concat (q|k|v), _add (o and down, plus the residual) and _swiglu
// (gate|up). The oracles compose separate ops (ops/quantized_fused.cpp): one GEMV per
// weight, each quantizing x and running its own parallel loop, a product tensor
// allocated per call, then a second op over it. Here x is quantized once and one
// parallel loop computes every row, each thread applying the epilogue to its own
// columns. The epilogues repeat the composition's arithmetic exactly (the product
// rounded to the output dtype first, then the same f32 formula), so the only
// departure from the oracle is the GEMV's (bar: docs/cpu.md).
#include <algorithm>

#include "cpu/fast/simd/cpu_features.h"
#include "cpu/fast/simd/exp_avx512.h"
#include "cpu/fast/gemv/gemv_call.h"
#include "cpu/fast/gemv/matmul_dispatch.h"
#include "cpu/fast/gemv/weight_prefetch.h"
#include "cpu/float_rows.h"
#include "cpu/silu_rows.h"
#include "cpu/parallel.h"
#include "metalrt/op_registry.h"
#include "metalrt/ops.h"

namespace metalrt::cpu::fast {
namespace {

// x quantized for a fused call on CPU tensors. Metal tensors reach the CPU providers
// too (the registry's reference tier on unified memory, when the Metal provider
// declines); those are left to the composition, whose parts the Metal providers run.
bool Activations(const OpCall& call, GemvActivations* act) {
  return call.inputs[0].device() == DeviceType::kCPU && QuantizeActivations(call.inputs[0], act);
}

// The concat's one-GEMV rows on the CPU (ops::QuantizedConcatIsOneGemv).
const ops::QuantizedGemvRowsRegistrar kConcatRows(DeviceType::kCPU, kGemvMaxRows);

bool FastConcat(const OpCall& call) {
  const std::vector<QuantizedTensor>& weights = call.param<std::vector<QuantizedTensor>>();
  const Tensor& out = call.outputs[0];
  GemvActivations act;
  if (weights.size() > 3 || !Activations(call, &act)) return false;
  const int64_t total = out.dim(1);
  const bool direct = out.dtype() == DType::kF32;
  float* result = direct ? out.data_as<float>() : StagingF32(0, act.m * total);
  GemvArgs args[3];
  int64_t first[4] = {0, 0, 0, 0};   // weight j owns output columns [first[j], first[j + 1])
  for (size_t j = 0; j < weights.size(); ++j) {
    args[j] = ArgsFor(weights[j], act, result + first[j], total);
    first[j + 1] = first[j] + weights[j].rows;
  }
  const GemvRowsFn rows = SelectedGemvRows();
  GemvReads reads;
  for (size_t j = 0; j < weights.size(); ++j)
    AddChunkReads(&reads, weights[j], total, kMinRowsPerChunk, first[j], first[j + 1], 0);
  AnnounceGemv(weights[0].data.data(), reads);
  ParallelFor(total, kMinRowsPerChunk, [&](int64_t begin, int64_t end) {
    for (size_t j = 0; j < weights.size(); ++j) {
      const int64_t lo = std::max(begin, first[j]), hi = std::min(end, first[j + 1]);
      if (lo < hi) rows(args[j], lo - first[j], hi - first[j]);
    }
  });
  if (!direct) StoreRowF32(out.data(), out.dtype(), 0, act.m * total, result);
  return true;
}

// out = residual + product, as add(residual, quantized_matmul_bt(x, w)); out may be
// the residual itself.
bool FastAdd(const OpCall& call) {
  const QuantizedTensor& w = call.param<QuantizedTensor>();
  const Tensor& residual = call.inputs[1];
  const Tensor& out = call.outputs[0];
  GemvActivations act;
  if (!Activations(call, &act)) return false;
  const int64_t n = w.rows;
  float* product = StagingF32(0, act.m * n);
  const GemvArgs args = ArgsFor(w, act, product, n);
  const GemvRowsFn rows = SelectedGemvRows();
  AnnounceRows(w, n, kMinRowsPerChunk);
  ParallelFor(n, kMinRowsPerChunk, [&](int64_t begin, int64_t end) {
    rows(args, begin, end);
    const int64_t width = end - begin;
    float* sum = StagingF32(1, width);
    for (int64_t i = 0; i < act.m; ++i) {
      float* p = product + i * n + begin;
      RoundThrough(out.dtype(), p, width);
      LoadRowF32(residual.data(), residual.dtype(), i * n + begin, width, sum);
      for (int64_t t = 0; t < width; ++t) sum[t] += p[t];
      StoreRowF32(out.data(), out.dtype(), i * n + begin, width, sum);
    }
  });
  return true;
}

// out = silu(gate) * up of the product [gate | up], as silu_and_mul(quantized_matmul_bt(x, w)):
// a thread computes gate rows [b, e) and up rows [h + b, h + e), so its columns of
// out need no other thread's product.
bool FastSwiglu(const OpCall& call) {
  const QuantizedTensor& w = call.param<QuantizedTensor>();
  const Tensor& out = call.outputs[0];
  GemvActivations act;
  if (!Activations(call, &act)) return false;
  const int64_t h = w.rows / 2;
  float* product = StagingF32(0, act.m * 2 * h);
  const GemvArgs args = ArgsFor(w, act, product, 2 * h);
  const GemvRowsFn rows = SelectedGemvRows();
  // The vectorised exp where the CPU runs AVX-512 (as the fast silu_and_mul): libm's
  // expf per value was a few percent of a decode step.
  const bool wide_exp = SelectedGemvIsa() == GemvIsa::kAvx512Vnni;
  GemvReads reads;
  AddChunkReads(&reads, w, h, kMinRowsPerChunk / 2, 0, h, 0);
  AddChunkReads(&reads, w, h, kMinRowsPerChunk / 2, 0, h, h);
  AnnounceGemv(w.data.data(), reads);
  ParallelFor(h, kMinRowsPerChunk / 2, [&](int64_t begin, int64_t end) {
    rows(args, begin, end);
    rows(args, h + begin, h + end);
    const int64_t width = end - begin;
    for (int64_t i = 0; i < act.m; ++i) {
      float* gate = product + i * 2 * h + begin;
      float* up = gate + h;
      RoundThrough(out.dtype(), gate, width);
      RoundThrough(out.dtype(), up, width);
      if (wide_exp) SiluAndMulRowAvx512(gate, up, width, gate);
      else SiluAndMulRow(gate, up, width);
      StoreRowF32(out.data(), out.dtype(), i * h + begin, width, gate);
    }
  });
  return true;
}

METALRT_REGISTER_OP_PROVIDER("quantized_matmul_bt_concat", DeviceType::kCPU, ProviderTier::kFast,
                             FastConcat);
METALRT_REGISTER_OP_PROVIDER("quantized_matmul_bt_add", DeviceType::kCPU, ProviderTier::kFast, FastAdd);
METALRT_REGISTER_OP_PROVIDER("quantized_matmul_bt_swiglu", DeviceType::kCPU, ProviderTier::kFast,
                             FastSwiglu);

}  // namespace
}  // namespace metalrt::cpu::fast
