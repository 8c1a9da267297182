#include "cpu/fast/gemv/gemv_call.h"

#include <atomic>
#include <vector>

#include "cpu/fast/simd/cpu_features.h"
#include "cpu/fast/gemv/matmul_dispatch.h"
#include "cpu/float_rows.h"
#include "cpu/parallel.h"
#include "metalrt/op_registry.h"

namespace metalrt::cpu::fast {
namespace {

template <class T>
T* Grown(std::vector<T>* v, int64_t n) {
  if (v->size() < static_cast<size_t>(n)) v->resize(static_cast<size_t>(n));
  return v->data();
}

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
    case QuantFormat::kQ3_K: return GemvFormat::kQ3_K;
    case QuantFormat::kQ2_K: return GemvFormat::kQ2_K;
    case QuantFormat::kMxfp4Gguf: return GemvFormat::kMxfp4Gguf;
    case QuantFormat::kMxfp4: return GemvFormat::kMxfp4;
    case QuantFormat::kAffine: break;
  }
  return GemvFormat::kAffine;
}

ScaleDType ScaleDTypeOf(DType d) {
  return d == DType::kF16 ? ScaleDType::kF16 : d == DType::kBF16 ? ScaleDType::kBF16 : ScaleDType::kF32;
}

// QuantizeRowsQ8 on the widest vectors the CPU runs (the same bytes on each).
bool QuantizeRowsQ8Selected(const float* x, int64_t rows, int64_t k, Q8Block* blocks) {
#if defined(__x86_64__)
  if (SelectedGemvIsa() == GemvIsa::kAvx512Vnni) return QuantizeRowsQ8Avx512(x, rows, k, blocks);
#endif
  return QuantizeRowsQ8(x, rows, k, blocks);
}

}  // namespace

bool QuantizeActivationRows(const Tensor& x, GemvActivations* act) {
  thread_local std::vector<float> xf;
  thread_local std::vector<Q8Block> xq;
  const int64_t k = x.dim(-1), m = x.numel() / k, blocks_per_row = k / 32;
  float* converted = x.dtype() == DType::kF32 ? nullptr : Grown(&xf, m * k);
  const float* values = converted != nullptr ? converted : static_cast<const float*>(x.data());
  Q8Block* blocks = Grown(&xq, m * blocks_per_row);
  // Rows are coded independently, so any split gives the same blocks.
  std::atomic<bool> finite{true};
  auto code = [&](int64_t begin, int64_t end) {
    if (converted != nullptr) LoadRowF32(x.data(), x.dtype(), begin * k, (end - begin) * k, converted + begin * k);
    if (!QuantizeRowsQ8Selected(values + begin * k, end - begin, k, blocks + begin * blocks_per_row))
      finite.store(false, std::memory_order_relaxed);
  };
  if (m <= kGemvMaxRows) code(0, m);
  else ParallelFor(m, kGemvMaxRows, code);
  if (!finite.load()) return false;
  *act = {blocks, m, k};
  return true;
}

bool QuantizeActivations(const Tensor& x, GemvActivations* act) {
  // Past kGemvMaxRows the prefill GEMM serves, except for decode rows (op_registry.h).
  return (x.dim(0) <= kGemvMaxRows || DecodeRows()) && QuantizeActivationRows(x, act);
}

GemvArgs ArgsFor(const QuantizedTensor& w, const GemvActivations& act, float* out, int64_t out_stride,
                 int64_t first_row) {
  const bool affine = w.format == QuantFormat::kAffine;
  // Bytes of one row of a per-row tensor (data, scales, biases).
  auto row_of = [&](const Tensor& t) {
    return static_cast<const uint8_t*>(t.data()) + first_row * (static_cast<int64_t>(t.nbytes()) / w.rows);
  };
  GemvArgs args{};
  args.format = FormatOf(w.format);
  args.bits = w.bits;
  args.group_size = w.group_size;
  args.k = act.k;
  args.m = act.m;
  args.data = row_of(w.data);
  args.row_bytes = static_cast<int64_t>(w.data.nbytes()) / w.rows;
  args.scales = HasScaleTensor(w.format) ? row_of(w.scales) : nullptr;
  args.biases = affine ? row_of(w.biases) : nullptr;
  args.scale_dtype = affine ? ScaleDTypeOf(w.scales.dtype()) : ScaleDType::kF32;
  args.f16_table = F16ToF32Table();
  args.x = act.blocks;
  args.out = out;
  args.out_stride = out_stride;
  return args;
}

GemvRowsFn SelectedGemvRows() {
  switch (SelectedGemvIsa()) {
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

float* StagingF32(int slot, int64_t n) {
  thread_local std::vector<float> staging[2];
  return Grown(&staging[slot], n);
}

void RoundThrough(DType dtype, float* v, int64_t n) {
  if (dtype == DType::kF32) return;
  thread_local std::vector<uint16_t> half;
  uint16_t* h = Grown(&half, n);
  StoreRowF32(h, dtype, 0, n, v);
  LoadRowF32(h, dtype, 0, n, v);
}

}  // namespace metalrt::cpu::fast
