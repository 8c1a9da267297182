// What every fast quantized GEMV provider shares (quantized_gemv.cpp and the fused
// ones, quantized_gemv_fused.cpp): x quantized once per call into per-thread scratch
// reused across calls (a decode step allocates nothing here), the kernel arguments
// of one weight, the weight rows split over the pool, and the f32 staging of
// f16/bf16 outputs.
#pragma once
#include <cstdint>

#include "cpu/fast/gemv/gemv_args.h"
#include "metalrt/quantized.h"
#include "metalrt/tensor.h"

namespace metalrt::cpu::fast {

// Weight rows per thread chunk at least: below this the pool's handoff costs more
// than the rows (a 576-wide Q4_1 row is ~360 bytes).
inline constexpr int64_t kMinRowsPerChunk = 64;

struct GemvActivations {
  const Q8Block* blocks;   // m * k / 32, valid until the calling thread's next QuantizeActivations
  int64_t m, k;
};

// x [m, k] (f32/f16/bf16) quantized to two-byte int8 blocks (q8_activation.h). False
// (the caller declines, the oracle serves) when m > kGemvMaxRows outside decode rows
// (DecodeRows, op_registry.h), or x holds a NaN or an infinity.
bool QuantizeActivations(const Tensor& x, GemvActivations* act);

// Every row of x [..., k] (contiguous f32/f16/bf16) quantized as above, however many
// (act->m = numel / k), split over the pool past kGemvMaxRows: callers that group the
// rows into GEMVs of their own (the MoE experts' pairs). False for a NaN or an infinity.
bool QuantizeActivationRows(const Tensor& x, GemvActivations* act);

// The kernel arguments of weight w against act, writing f32 out[i * out_stride + j]
// for kernel row j, which is row first_row + j of w (an expert's rows of a stack).
GemvArgs ArgsFor(const QuantizedTensor& w, const GemvActivations& act, float* out, int64_t out_stride,
                 int64_t first_row = 0);

// The best kernel this CPU supports (cpu_features.h), chosen once per call.
using GemvRowsFn = void (*)(const GemvArgs&, int64_t, int64_t);
GemvRowsFn SelectedGemvRows();

// f32 scratch of at least n values for the calling thread, slot 0 or 1 (two live
// buffers at once); grows, never shrinks.
float* StagingF32(int slot, int64_t n);

// v[0, n) rounded to dtype and back to f32 (identity for f32): the value a
// composition of ops would read back from a dtype tensor.
void RoundThrough(DType dtype, float* v, int64_t n);

}  // namespace metalrt::cpu::fast
