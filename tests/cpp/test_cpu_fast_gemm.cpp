// Gates of the CPU device's BLAS prefill GEMM (cpp/cpu/fast/blas): matmul, matmul_bt and
// quantized_matmul_bt for m above the GEMV's rows, against the oracle (the same call
// with the provider disabled) in the op-case table, at the default model's shapes
// (K = 576, 1536; N = 576, 1536, 49,152) and boundary shapes (m = 17, 33, 128, 512; odd
// N = 3, 13), f32/f16/bf16, every quantized format.
//
// Bars: only the order of the f32 sums differs from the oracle (both convert operands to
// f32 exactly and round the result once), so f32 outputs are held to NMSE <= 1e-10 and
// every element within 1e-5 of the output's largest magnitude; f16/bf16 outputs may
// round one ulp the other way: NMSE <= 1e-6 (f16) / 2e-5 (bf16), one ulp of the
// largest magnitude per element.
//
// Built without a BLAS (METALRT_BLAS=off, or the library absent), the providers do not
// exist, no case is registered, and the gates below check that the oracle serves.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "cpu/fast/matmul_dispatch.h"
#include "metalrt/op_registry.h"
#include "metalrt/ops.h"
#include "op_cases.h"
#include "quantized_testing.h"

using namespace metalrt;
using namespace metalrt::testing;

namespace {

constexpr bool kHaveBlas = std::strcmp(METALRT_BLAS_NAME, "none") != 0;
constexpr int64_t kFirstGemmRows = cpu::fast::kGemvMaxRows + 1;

void SetBars(OpCase& c, DType dtype) {
  c.device = DeviceType::kCPU;
  c.nmse = dtype == DType::kF32 ? 1e-10 : dtype == DType::kF16 ? 1e-6 : 2e-5;
  c.max_rel = dtype == DType::kF32 ? 1e-5 : 2 * UnitRoundoff(dtype);
}

// matmul_bt (b [n, k]) or matmul (b [k, n]).
OpCase FloatCase(bool bt, int64_t m, int64_t k, int64_t n, DType dtype, uint32_t seed) {
  const std::string op = bt ? "matmul_bt" : "matmul";
  const Tensor a = MakeFloat({m, k}, dtype, RandomValuesOf(dtype, m * k, seed));
  const Shape b_shape = bt ? Shape{n, k} : Shape{k, n};
  const Tensor b = MakeFloat(b_shape, dtype, RandomValuesOf(dtype, n * k, seed + 1));
  OpCase c = SingleOutputCase(CaseName(op, dtype, {m, k, n}, "blas"), op, "", {a, b}, {{m, n}, dtype}, {},
                              [bt](const Inputs& in, const Tensor& out) {
                                if (bt) ops::MatmulBT(in[0], in[1], out);
                                else ops::Matmul(in[0], in[1], out);
                              });
  c.provider = "cpu_blas_" + op;
  c.kernels.clear();
  SetBars(c, dtype);
  return c;
}

OpCase QuantizedCase(const WeightSpec& s, int64_t m, int64_t k, int64_t n, DType dtype, uint32_t seed) {
  std::vector<Tensor> inputs{MakeFloat({m, k}, dtype, RandomValuesOf(dtype, m * k, seed))};
  for (const Tensor& t : RandomWeight(s, n, k, seed + 1)) inputs.push_back(t);
  OpCase c = SingleOutputCase(CaseName("quantized_matmul_bt", dtype, {m, k, n}, SpecName(s) + "/blas"),
                              "quantized_matmul_bt", "", inputs, {{m, n}, dtype}, {},
                              [s, n, k](const Inputs& in, const Tensor& out) {
                                ops::QuantizedMatmulBT(in[0], WeightOf(s, n, k, in, 1), out);
                              });
  c.provider = "cpu_blas_quantized_matmul_bt";
  c.declines = 1;   // the GEMV, tried first, owns m <= kGemvMaxRows only
  c.kernels.clear();
  SetBars(c, dtype);
  return c;
}

}  // namespace

METALRT_OP_CASES(cpu_fast_gemm_cases) {
  std::vector<OpCase> cases;
  if (!kHaveBlas) return cases;
  uint32_t seed = 14200;
  auto next = [&seed] { return seed += 7; };
  for (bool bt : {true, false}) {
    for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
      cases.push_back(FloatCase(bt, kFirstGemmRows, 576, 3, dtype, next()));
      cases.push_back(FloatCase(bt, 33, 1536, 13, dtype, next()));
      cases.push_back(FloatCase(bt, 128, 576, 1536, dtype, next()));
    }
    // The model's projections at a 512-token prefill, and the vocabulary.
    cases.push_back(FloatCase(bt, 512, 576, 576, DType::kF32, next()));
    cases.push_back(FloatCase(bt, 128, 1536, 576, DType::kF32, next()));
    cases.push_back(FloatCase(bt, 33, 576, 49152, DType::kF32, next()));
  }
  // Every GGUF format (K-quants in blocks of 256: K = 1536 = 6 blocks, 256 = one).
  for (QuantFormat f : kGgufFormats) {
    const WeightSpec s{f};
    const int64_t k_small = IsKQuant(f) ? 256 : 576, k_ffn = 1536;
    cases.push_back(QuantizedCase(s, kFirstGemmRows, k_small, 3, DType::kF32, next()));
    cases.push_back(QuantizedCase(s, 33, k_ffn, 13, DType::kF32, next()));
    cases.push_back(QuantizedCase(s, 128, k_small, 576, DType::kF32, next()));
    cases.push_back(QuantizedCase(s, 33, k_small, 40, DType::kBF16, next()));
    cases.push_back(QuantizedCase(s, 33, k_ffn, 40, DType::kF16, next()));
  }
  // The default model's Q4_1 at its prefill shapes: q/o (576 -> 576) at 512 tokens, the
  // FFN's down projection (1536 -> 576), the vocabulary head (576 -> 49,152).
  const WeightSpec q4_1{QuantFormat::kQ4_1};
  cases.push_back(QuantizedCase(q4_1, 512, 576, 576, DType::kF32, next()));
  cases.push_back(QuantizedCase(q4_1, 128, 1536, 576, DType::kF32, next()));
  cases.push_back(QuantizedCase(q4_1, 33, 576, 49152, DType::kF32, next()));
  // MLX affine: each bit width, a group size each, scales in each float dtype.
  const DType scale_dtypes[] = {DType::kF16, DType::kBF16, DType::kF32};
  int variant = 0;
  for (int bits : {2, 3, 4, 5, 6, 8}) {
    const int group_size = 32 << (variant % 3);
    const WeightSpec s{QuantFormat::kAffine, bits, group_size, scale_dtypes[variant % 3]};
    cases.push_back(QuantizedCase(s, 33, 768, 13, DType::kF32, next()));
    ++variant;
  }
  return cases;
}

namespace {

Tensor RandomF32(const Shape& shape, uint32_t seed) {
  return MakeFloat(shape, DType::kF32, RandomValues(static_cast<size_t>(Numel(shape)), seed));
}

}  // namespace

TEST_CASE("cpu fast gemm: the BLAS providers are tried ahead of the oracle, or absent without a BLAS") {
  const auto bt = ListProviders("matmul_bt", DeviceType::kCPU);
  const auto quantized = ListProviders("quantized_matmul_bt", DeviceType::kCPU);
  const bool listed = std::count(bt.begin(), bt.end(), "cpu_blas_matmul_bt") == 1;
  CHECK(listed == kHaveBlas);
  CHECK((std::count(quantized.begin(), quantized.end(), "cpu_blas_quantized_matmul_bt") == 1) == kHaveBlas);
  if (kHaveBlas) {
    const auto pos = [](const std::vector<std::string>& v, const std::string& name) {
      return std::find(v.begin(), v.end(), name) - v.begin();
    };
    CHECK(pos(bt, "cpu_blas_matmul_bt") < pos(bt, "cpu_matmul_bt"));
    CHECK(pos(quantized, "cpu_blas_quantized_matmul_bt") < pos(quantized, "cpu_quantized_matmul_bt"));
  }
}

TEST_CASE("cpu fast gemm: a prefill-sized matmul_bt is served by the BLAS provider, else by the oracle") {
  const Tensor a = RandomF32({64, 96}, 1), b = RandomF32({24, 96}, 2);
  ResetProviderStats();
  const Tensor out = Poisoned({64, 24}, DType::kF32);
  ops::MatmulBT(a, b, out);
  const ProviderStats stats = GetProviderStats("matmul_bt", DeviceType::kCPU);
  CHECK(stats.last_selected == (kHaveBlas ? "cpu_blas_matmul_bt" : "cpu_matmul_bt"));
  CHECK(stats.calls == 1);
  CHECK(stats.declines == 0);
  // Against float64: f32 sums of 96 products.
  const std::vector<double> av = ReadFloat(a), bv = ReadFloat(b), got = ReadFloat(out);
  std::vector<double> ref(got.size());
  for (int64_t i = 0; i < 64; ++i)
    for (int64_t j = 0; j < 24; ++j) {
      double s = 0;
      for (int64_t p = 0; p < 96; ++p) s += av[i * 96 + p] * bv[j * 96 + p];
      ref[i * 24 + j] = s;
    }
  CHECK(Nmse(got, ref) <= 1e-10);
}

TEST_CASE("cpu fast gemm: with the BLAS provider disabled the oracle serves") {
  if (!kHaveBlas) return;   // nothing to disable: the gate above shows the oracle serving
  const Tensor x = RandomF32({40, 64}, 3);
  const WeightSpec s{QuantFormat::kQ4_1};
  const std::vector<Tensor> w = RandomWeight(s, 8, 64, 4);
  SetProviderEnabled("cpu_blas_quantized_matmul_bt", false);
  ResetProviderStats();
  const Tensor out = Poisoned({40, 8}, DType::kF32);
  ops::QuantizedMatmulBT(x, WeightOf(s, 8, 64, w, 0), out);
  SetProviderEnabled("cpu_blas_quantized_matmul_bt", true);
  const ProviderStats stats = GetProviderStats("quantized_matmul_bt", DeviceType::kCPU);
  CHECK(stats.last_selected != "cpu_blas_quantized_matmul_bt");
  CHECK(stats.calls == 1);
  const std::vector<double> got = ReadFloat(out);
  CHECK(std::none_of(got.begin(), got.end(), [](double v) { return std::isnan(v); }));
}

TEST_CASE("cpu fast gemm: decode-sized m (up to kGemvMaxRows) is declined to the GEMV or the oracle") {
  if (!kHaveBlas) return;   // no provider to decline
  for (int64_t m : {int64_t{1}, cpu::fast::kGemvMaxRows}) {
    CAPTURE(m);
    const Tensor a = RandomF32({m, 32}, 5), b = RandomF32({8, 32}, 6);
    ResetProviderStats();
    ops::MatmulBT(a, b, Poisoned({m, 8}, DType::kF32));
    const ProviderStats stats = GetProviderStats("matmul_bt", DeviceType::kCPU);
    CHECK(stats.last_selected != "cpu_blas_matmul_bt");
    CHECK(stats.declines >= 1);
  }
}
