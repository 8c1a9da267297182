// The fast CPU provider of quantized_matmul_bt for decode-sized products (m <=
// kGemvMaxRows): x quantized once per call to int8 blocks (q8_activation.h), then
// integer block dots in the best SIMD kernel the CPU supports (cpu_features.h), the
// weight rows split into one contiguous slice per thread. Registered ahead of the
// oracle (cpu/quantized.cpp), which serves whatever this declines: larger m, and an x
// holding NaN or infinity.
#include "cpu/fast/gemv/gemv_call.h"
#include "cpu/fast/gemv/weight_prefetch.h"
#include "cpu/float_rows.h"
#include "cpu/parallel.h"
#include "metalrt/op_registry.h"

namespace metalrt::cpu::fast {
namespace {

bool FastQuantizedMatmulBT(const OpCall& call) {
  const QuantizedTensor& w = call.param<QuantizedTensor>();
  const Tensor& out = call.outputs[0];
  GemvActivations act;
  if (!QuantizeActivations(call.inputs[0], &act)) return false;
  const int64_t n = w.rows;
  // The f32 result is staged when out is f16/bf16; an f32 out is written in place.
  const bool direct = out.dtype() == DType::kF32;
  float* result = direct ? out.data_as<float>() : StagingF32(0, act.m * n);
  const GemvArgs args = ArgsFor(w, act, result, n);
  const GemvRowsFn rows = SelectedGemvRows();
  AnnounceRows(w, n, kMinRowsPerChunk);
  ParallelFor(n, kMinRowsPerChunk, [&](int64_t begin, int64_t end) { rows(args, begin, end); });
  if (!direct) StoreRowF32(out.data(), out.dtype(), 0, act.m * n, result);
  return true;
}

METALRT_REGISTER_OP_PROVIDER("quantized_matmul_bt", DeviceType::kCPU, ProviderTier::kFast,
                             FastQuantizedMatmulBT);

}  // namespace
}  // namespace metalrt::cpu::fast
