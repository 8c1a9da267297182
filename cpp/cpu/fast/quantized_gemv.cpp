// The fast CPU provider of quantized_matmul_bt for decode-sized products (m <=
// kGemvMaxRows): x quantized once per call to int8 blocks (q8_activation.h), then
// integer block dots in the best SIMD kernel the CPU supports (cpu_features.h), the
// weight rows split into one contiguous slice per thread. Registered ahead of the
// oracle (cpu/quantized.cpp), which serves whatever this declines: larger m, and an x
// holding NaN or infinity.
#include <vector>

#include "cpu/fast/cpu_features.h"
#include "cpu/fast/gemv_args.h"
#include "cpu/fast/matmul_dispatch.h"
#include "cpu/float_rows.h"
#include "cpu/parallel.h"
#include "metalrt/op_registry.h"
#include "metalrt/quantized.h"

namespace metalrt::cpu::fast {
namespace {

GemvFormat FormatOf(QuantFormat f) {
  switch (f) {
    case QuantFormat::kQ4_0: return GemvFormat::kQ4_0;
    case QuantFormat::kQ4_1: return GemvFormat::kQ4_1;
    case QuantFormat::kQ5_0: return GemvFormat::kQ5_0;
    case QuantFormat::kQ5_1: return GemvFormat::kQ5_1;
    case QuantFormat::kQ8_0: return GemvFormat::kQ8_0;
    case QuantFormat::kQ4_K: return GemvFormat::kQ4_K;
    case QuantFormat::kQ5_K: return GemvFormat::kQ5_K;
    case QuantFormat::kQ6_K: return GemvFormat::kQ6_K;
    case QuantFormat::kAffine: break;
  }
  return GemvFormat::kAffine;
}

ScaleDType ScaleDTypeOf(DType d) {
  return d == DType::kF16 ? ScaleDType::kF16 : d == DType::kBF16 ? ScaleDType::kBF16 : ScaleDType::kF32;
}

using RowsFn = void (*)(const GemvArgs&, int64_t, int64_t);

RowsFn KernelFor(GemvIsa isa) {
  switch (isa) {
#if defined(__x86_64__)
    case GemvIsa::kAvx2: return GemvRowsAvx2;
    case GemvIsa::kAvx512Vnni: return GemvRowsAvx512Vnni;
#endif
#if defined(__aarch64__)
    case GemvIsa::kNeon: return GemvRowsNeon;
#endif
    default: return GemvRowsPortable;
  }
}

// Weight rows per thread chunk at least: below this the pool's wake-up costs more
// than the rows (a 576-wide Q4_1 row is ~360 bytes).
constexpr int64_t kMinRowsPerChunk = 64;

bool FastQuantizedMatmulBT(const OpCall& call) {
  const Tensor& x = call.inputs[0];
  const QuantizedTensor& w = call.param<QuantizedTensor>();
  const Tensor& out = call.outputs[0];
  const int64_t m = x.dim(0), n = w.rows, k = w.cols;
  if (m > kGemvMaxRows) return false;
  std::vector<float> xf(static_cast<size_t>(m * k));
  LoadRowF32(x.data(), x.dtype(), 0, m * k, xf.data());
  std::vector<Q8Block> xq;
  if (!QuantizeRowsQ8(xf.data(), m, k, &xq)) return false;

  const bool affine = w.format == QuantFormat::kAffine;
  std::vector<float> result(static_cast<size_t>(m * n));
  GemvArgs args{};
  args.format = FormatOf(w.format);
  args.bits = w.bits;
  args.group_size = w.group_size;
  args.k = k;
  args.n = n;
  args.m = m;
  args.data = w.data.data_as<uint8_t>();
  args.row_bytes = static_cast<int64_t>(w.data.nbytes()) / n;
  args.scales = affine ? w.scales.data() : nullptr;
  args.biases = affine ? w.biases.data() : nullptr;
  args.scale_dtype = affine ? ScaleDTypeOf(w.scales.dtype()) : ScaleDType::kF32;
  args.f16_table = F16ToF32Table();
  args.x = xq.data();
  // The f32 result is staged when out is f16/bf16; an f32 out is written in place.
  const bool direct = out.dtype() == DType::kF32;
  args.out = direct ? out.data_as<float>() : result.data();
  const RowsFn rows = KernelFor(SelectedGemvIsa());
  ParallelFor(n, kMinRowsPerChunk, [&](int64_t begin, int64_t end) { rows(args, begin, end); });
  if (!direct) StoreRowF32(out.data(), out.dtype(), 0, m * n, result.data());
  return true;
}

METALRT_REGISTER_PROVIDER("quantized_matmul_bt", DeviceType::kCPU, "cpu_fast_quantized_matmul_bt", 5,
                          FastQuantizedMatmulBT);

}  // namespace
}  // namespace metalrt::cpu::fast
