// Gates of the fast CPU fused quantized GEMVs (cpp/cpu/fast/gemv/quantized_gemv_fused.cpp:
// cpu_fast_quantized_matmul_bt_{concat,add,swiglu}) in the op-case table against the
// oracles' compositions (one quantized_matmul_bt per weight, then add or
// silu_and_mul), NaN-poisoned outputs, the provider stats proving the fast provider
// served. Shapes: the default model's decode products (q|k|v 576 -> 576+192+192, o and
// down with the residual, gate|up 576 -> 2 x 1536) at m = 1, 7, 16, boundaries (K =
// 32, N = 1, 3, uneven concatenated parts) in every format, on 1 and 2 threads. Bar:
// the GEMV's (test_cpu_fast_quantized.cpp), since the epilogues repeat the
// composition's arithmetic: f32 NMSE <= 1e-7 and every element within 2e-4 of the
// largest magnitude; f16/bf16 NMSE <= 1e-6 and 4 unit roundoffs.
#include <doctest/doctest.h>

#include <algorithm>

#include "cpu/parallel.h"
#include "metalrt/ops.h"
#include "op_cases.h"
#include "quantized_testing.h"

using namespace metalrt;
using namespace metalrt::testing;

namespace {

enum class Fused { kConcat, kAdd, kSwiglu };

struct FusedShape {
  int64_t m, k;
  std::vector<int64_t> ns;   // concat: each weight's rows; add: {n}; swiglu: {inner}
};

const char* OpName(Fused f) {
  return f == Fused::kConcat ? "quantized_matmul_bt_concat" : f == Fused::kAdd ? "quantized_matmul_bt_add"
                                                                                : "quantized_matmul_bt_swiglu";
}

int64_t Sum(const std::vector<int64_t>& ns) {
  int64_t total = 0;
  for (int64_t n : ns) total += n;
  return total;
}

OpCase FusedCase(Fused f, const WeightSpec& s, const FusedShape& sh, DType dtype, int threads, uint32_t seed) {
  const int64_t m = sh.m, k = sh.k;
  const int64_t out_n = f == Fused::kConcat ? Sum(sh.ns) : sh.ns[0];
  std::vector<Tensor> inputs{MakeFloat({m, k}, dtype, RandomValuesOf(dtype, m * k, seed))};
  if (f == Fused::kAdd) inputs.push_back(MakeFloat({m, out_n}, dtype, RandomValuesOf(dtype, m * out_n, seed + 1)));
  const size_t first_weight = inputs.size();
  std::vector<int64_t> rows = f == Fused::kConcat ? sh.ns : std::vector<int64_t>{f == Fused::kSwiglu ? 2 * out_n : out_n};
  for (int64_t n : rows)
    for (const Tensor& t : RandomWeight(s, n, k, ++seed + 7)) inputs.push_back(t);
  OpCase c;
  c.name = CaseName(OpName(f), dtype, {m, k, out_n}, "cpu_fast_" + SpecName(s) + "_t" + std::to_string(threads));
  c.op = OpName(f);
  c.provider = std::string("cpu_fast_") + OpName(f);
  c.device = DeviceType::kCPU;
  c.inputs = inputs;
  c.outputs = {{{m, out_n}, dtype}};
  c.run = [f, s, k, rows, first_weight, threads](const Inputs& in, const Outputs& out) {
    const cpu::ScopedParallelThreadLimit limit(threads);
    const size_t per = RandomWeight(s, 1, 32, 0).size();   // tensors per weight
    std::vector<QuantizedTensor> weights;
    for (size_t j = 0; j < rows.size(); ++j) weights.push_back(WeightOf(s, rows[j], k, in, first_weight + j * per));
    if (f == Fused::kConcat) ops::QuantizedMatmulBTConcat(in[0], weights, out[0]);
    else if (f == Fused::kAdd) ops::QuantizedMatmulBTAdd(in[0], weights[0], in[1], out[0]);
    else ops::QuantizedMatmulBTSwiglu(in[0], weights[0], out[0]);
    return Returned{};
  };
  c.nmse = dtype == DType::kF32 ? 1e-7 : 1e-6;
  c.max_rel = dtype == DType::kF32 ? 2e-4 : 4 * UnitRoundoff(dtype);
  return c;
}

std::vector<WeightSpec> Specs() {
  std::vector<WeightSpec> specs =
      GgufSpecsAnd({{QuantFormat::kAffine, 4, 64, DType::kBF16}, {QuantFormat::kAffine, 8, 32, DType::kF16}});
  // MXFP4 last, so the cases before it keep their seeds (and random data).
  std::stable_partition(specs.begin(), specs.end(), [](const WeightSpec& s) { return s.format != QuantFormat::kMxfp4Gguf; });
  specs.push_back(kMxfp4Spec);
  return specs;
}

}  // namespace

METALRT_OP_CASES(cpu_fast_quantized_fused_cases) {
  std::vector<OpCase> cases;
  uint32_t seed = 41000;
  const WeightSpec q41{QuantFormat::kQ4_1};
  for (int threads : {1, 2})
    for (int64_t m : {1, 7, 16}) {
      cases.push_back(FusedCase(Fused::kConcat, q41, {m, 576, {576, 192, 192}}, DType::kF32, threads, seed += 10));
      cases.push_back(FusedCase(Fused::kAdd, q41, {m, 576, {576}}, DType::kF32, threads, seed += 10));
      cases.push_back(FusedCase(Fused::kAdd, q41, {m, 1536, {576}}, DType::kF32, threads, seed += 10));
      cases.push_back(FusedCase(Fused::kSwiglu, q41, {m, 576, {1536}}, DType::kF32, threads, seed += 10));
    }
  // The model's own dtypes: the product rounds to f16/bf16 before the epilogue.
  for (DType dtype : {DType::kF16, DType::kBF16}) {
    cases.push_back(FusedCase(Fused::kConcat, q41, {1, 576, {576, 192, 192}}, dtype, 2, seed += 10));
    cases.push_back(FusedCase(Fused::kAdd, q41, {7, 1536, {576}}, dtype, 2, seed += 10));
    cases.push_back(FusedCase(Fused::kSwiglu, q41, {16, 576, {1536}}, dtype, 2, seed += 10));
  }
  // Boundaries in every format: parts and widths below a thread chunk, K one block.
  // (A lone output of one 32-value dot is not a case: the bar is relative to the
  // output's largest magnitude, and one cancelling dot can be far below |x| |w|.)
  for (const WeightSpec& s : Specs()) {
    const int64_t k = IsKQuant(s.format) ? 256 : IsAffine(s) ? s.group_size : 32;
    for (int threads : {1, 2}) {
      cases.push_back(FusedCase(Fused::kConcat, s, {7, k, {5, 3, 130}}, DType::kF32, threads, seed += 10));
      cases.push_back(FusedCase(Fused::kAdd, s, {16, k, {1}}, DType::kF32, threads, seed += 10));
      cases.push_back(FusedCase(Fused::kSwiglu, s, {1, k, {3}}, DType::kF32, threads, seed += 10));
      cases.push_back(FusedCase(Fused::kSwiglu, s, {7, k, {67}}, DType::kF32, threads, seed += 10));
    }
  }
  return cases;
}
