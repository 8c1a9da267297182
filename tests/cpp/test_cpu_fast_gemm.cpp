// Gates of the CPU device's BLAS prefill GEMM (cpp/cpu/fast/prefill/blas): matmul, matmul_bt and
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
// The bf16 GEMM (cpu_bf16_matmul_bt, cpu_bf16_quantized_matmul_bt; operands rounded to
// bf16, f32 sums) departs from the oracle by that rounding (8 significant bits, unit
// roundoff 2^-8, twice per product): measured NMSE 2e-6 .. 1.1e-5 and elements within
// 3.7e-3 of the output's largest magnitude (6.5e-3 for bf16 outputs, which round once
// more). Held to NMSE <= kBf16Nmse (3e-5; +1e-5 for bf16 outputs) and kBf16MaxRel
// (1.5e-2; + 2 unit roundoffs of an f16/bf16 output). Its cases run only on a CPU with
// AVX-512 BF16, with METALRT_CPU_GEMM=bf16 (unset, f32/f16 weights stay on the sgemm),
// once for each bf16 kernel the CPU runs (METALRT_CPU_AMX=off: AVX-512 BF16; on: AMX
// tiles, where the CPU has them; the same rounded operands, sums in another order, so
// the same bars); the sgemm's cases run with METALRT_CPU_GEMM=f32, so the bf16 provider
// (tried first) declines them.
//
// Built without a BLAS (METALRT_BLAS=off, or the library absent), the providers do not
// exist, no case is registered, and the gates below check that the oracle serves.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

#include "cpu/fast/simd/cpu_features.h"
#include "cpu_bf16_testing.h"
#include "cpu/fast/prefill/gemm_bf16.h"
#include "cpu/fast/gemv/matmul_dispatch.h"
#include "cpu/fast/prefill/prefill_gemm.h"
#include "cpu/parallel.h"
#include "cpu/quantized_blocks.h"
#include "metalrt/op_registry.h"
#include "metalrt/ops.h"
#include "op_cases.h"
#include "quantized_testing.h"

using namespace metalrt;
using namespace metalrt::testing;

namespace {

constexpr bool kHaveBlas = std::strcmp(METALRT_BLAS_NAME, "none") != 0;
constexpr int64_t kFirstGemmRows = cpu::fast::kGemvMaxRows + 1;

using cpu::fast::Bf16Kernel;
using cpu::fast::PrefillGemm;

constexpr double kBf16Nmse = 3e-5;
constexpr double kBf16MaxRel = 1.5e-2;

void SetBars(OpCase& c, DType dtype, PrefillGemm gemm) {
  c.device = DeviceType::kCPU;
  if (gemm == PrefillGemm::kBf16) {
    c.nmse = kBf16Nmse + (dtype == DType::kBF16 ? 1e-5 : 0.0);
    c.max_rel = kBf16MaxRel + (dtype == DType::kF32 ? 0.0 : 2 * UnitRoundoff(dtype));
    return;
  }
  c.nmse = dtype == DType::kF32 ? 1e-10 : dtype == DType::kF16 ? 1e-6 : 2e-5;
  c.max_rel = dtype == DType::kF32 ? 1e-5 : 2 * UnitRoundoff(dtype);
}

// The case's provider for `op`, and its run under METALRT_CPU_GEMM=<gemm> (read by the
// fast providers only, so the oracle's run is the same either way).
void UseGemm(OpCase& c, const std::string& op, PrefillGemm gemm) {
  const char* name = cpu::fast::PrefillGemmName(gemm);
  c.provider = (gemm == PrefillGemm::kBf16 ? "cpu_bf16_" : "cpu_blas_") + op;
  RunUnder(c, "METALRT_CPU_GEMM", name);
}

// matmul_bt (b [n, k]) or matmul (b [k, n]).
OpCase FloatCase(bool bt, int64_t m, int64_t k, int64_t n, DType dtype, uint32_t seed,
                 PrefillGemm gemm = PrefillGemm::kF32) {
  const std::string op = bt ? "matmul_bt" : "matmul";
  const Tensor a = MakeFloat({m, k}, dtype, RandomValuesOf(dtype, m * k, seed));
  const Shape b_shape = bt ? Shape{n, k} : Shape{k, n};
  const Tensor b = MakeFloat(b_shape, dtype, RandomValuesOf(dtype, n * k, seed + 1));
  OpCase c = SingleOutputCase(CaseName(op, dtype, {m, k, n}, PrefillGemmName(gemm)), op, "", {a, b}, {{m, n}, dtype}, {},
                              [bt](const Inputs& in, const Tensor& out) {
                                if (bt) ops::MatmulBT(in[0], in[1], out);
                                else ops::Matmul(in[0], in[1], out);
                              });
  c.kernels.clear();
  UseGemm(c, op, gemm);
  SetBars(c, dtype, gemm);
  return c;
}

OpCase QuantizedCase(const WeightSpec& s, int64_t m, int64_t k, int64_t n, DType dtype, uint32_t seed,
                     PrefillGemm gemm = PrefillGemm::kF32) {
  std::vector<Tensor> inputs{MakeFloat({m, k}, dtype, RandomValuesOf(dtype, m * k, seed))};
  for (const Tensor& t : RandomWeight(s, n, k, seed + 1)) inputs.push_back(t);
  OpCase c = SingleOutputCase(CaseName("quantized_matmul_bt", dtype, {m, k, n}, SpecName(s) + "/" + PrefillGemmName(gemm)),
                              "quantized_matmul_bt", "", inputs, {{m, n}, dtype}, {},
                              [s, n, k](const Inputs& in, const Tensor& out) {
                                ops::QuantizedMatmulBT(in[0], WeightOf(s, n, k, in, 1), out);
                              });
  c.kernels.clear();
  UseGemm(c, "quantized_matmul_bt", gemm);
  SetBars(c, dtype, gemm);
  return c;
}

// quantized_matmul_bt_swiglu on the bf16 GEMM with its SwiGLU epilogue
// (quantized_gemm_swiglu.cpp): w holds 2 * inner rows (gate, then up).
OpCase SwigluCase(QuantFormat f, int64_t m, int64_t k, int64_t inner, uint32_t seed) {
  const WeightSpec s{f};
  std::vector<Tensor> inputs{MakeFloat({m, k}, DType::kF32, RandomValuesOf(DType::kF32, m * k, seed))};
  for (const Tensor& t : RandomWeight(s, 2 * inner, k, seed + 1)) inputs.push_back(t);
  OpCase c = SingleOutputCase(CaseName("quantized_matmul_bt_swiglu", DType::kF32, {m, k, inner}, SpecName(s) + "/bf16"),
                              "quantized_matmul_bt_swiglu", "", inputs, {{m, inner}, DType::kF32}, {},
                              [s, inner, k](const Inputs& in, const Tensor& out) {
                                ops::QuantizedMatmulBTSwiglu(in[0], WeightOf(s, 2 * inner, k, in, 1), out);
                              });
  c.kernels.clear();
  UseGemm(c, "quantized_matmul_bt_swiglu", PrefillGemm::kBf16);
  SetBars(c, DType::kF32, PrefillGemm::kBf16);
  return c;
}

}  // namespace

METALRT_OP_CASES(cpu_fast_gemm_cases) {
  std::vector<OpCase> cases;
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
  // The sgemm's cases need a BLAS build; the bf16 GEMM's (ours) run on every build.
  if (!kHaveBlas) cases.clear();
  if (!cpu::fast::CpuHasAvx512Bf16()) return cases;
  // The bf16 GEMM: the model's shapes (K = 576, 1536; N = 192, 576, 3072 at prefills of
  // 128 and 512 tokens, the vocabulary's 49,152) and boundaries (m = 17, 33: edge tiles
  // of 16-row blocks; N = 1, 3, 13: edge tiles of 8 weight rows, partial AMX tiles;
  // K = 768 / 64 of the MLX case: 24 AMX steps of 32), every output dtype.
  constexpr PrefillGemm kBf16 = PrefillGemm::kBf16;
  const size_t first_bf16 = cases.size();
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
    cases.push_back(FloatCase(true, kFirstGemmRows, 576, 1, dtype, next(), kBf16));
    cases.push_back(FloatCase(true, 33, 1536, 3, dtype, next(), kBf16));
    cases.push_back(FloatCase(true, 128, 576, 576, dtype, next(), kBf16));
  }
  cases.push_back(FloatCase(true, 512, 1536, 576, DType::kF32, next(), kBf16));
  cases.push_back(FloatCase(true, 33, 576, 49152, DType::kF32, next(), kBf16));
  for (QuantFormat f : kGgufFormats) {
    const WeightSpec s{f};
    const int64_t k_small = IsKQuant(f) ? 256 : 576;
    cases.push_back(QuantizedCase(s, kFirstGemmRows, k_small, 3, DType::kF32, next(), kBf16));
    cases.push_back(QuantizedCase(s, 33, 1536, 13, DType::kBF16, next(), kBf16));
  }
  cases.push_back(QuantizedCase(q4_1, 128, 576, 3072, DType::kF32, next(), kBf16));
  cases.push_back(QuantizedCase(q4_1, 512, 576, 192, DType::kF32, next(), kBf16));
  cases.push_back(QuantizedCase(q4_1, 512, 1536, 576, DType::kF32, next(), kBf16));
  cases.push_back(QuantizedCase(q4_1, 128, 576, 49152, DType::kF32, next(), kBf16));
  cases.push_back(QuantizedCase(q4_1, kFirstGemmRows, 576, 1, DType::kF16, next(), kBf16));
  cases.push_back(QuantizedCase(WeightSpec{QuantFormat::kAffine, 4, 64, DType::kBF16}, 33, 768, 13, DType::kF32,
                                next(), kBf16));
  // The fused SwiGLU: the model's gate|up (576 -> 2 x 1536) at 128 and 512 tokens, and
  // boundaries (m = 17, 33; inner = 1, 13, 65: partial panels of 64 gate rows).
  cases.push_back(SwigluCase(QuantFormat::kQ4_1, 512, 576, 1536, next()));
  cases.push_back(SwigluCase(QuantFormat::kQ4_1, 128, 576, 1536, next()));
  cases.push_back(SwigluCase(QuantFormat::kQ8_0, kFirstGemmRows, 576, 1, next()));
  cases.push_back(SwigluCase(QuantFormat::kQ4_0, 33, 1536, 13, next()));
  cases.push_back(SwigluCase(QuantFormat::kQ8_0, 33, 576, 65, next()));
  const std::vector<OpCase> bf16(cases.begin() + static_cast<std::ptrdiff_t>(first_bf16), cases.end());
  cases.resize(first_bf16);
  for (Bf16Kernel kernel : Bf16Kernels())
    for (const OpCase& c : bf16) cases.push_back(OnKernel(c, kernel));
  return cases;
}

namespace {

Tensor RandomF32(const Shape& shape, uint32_t seed) {
  return MakeFloat(shape, DType::kF32, RandomValues(static_cast<size_t>(Numel(shape)), seed));
}

}  // namespace

TEST_CASE("cpu providers: each op's tiers are tried prefill-bf16, prefill (BLAS builds), fast, oracle") {
  // ProviderTier's order (metalrt/op_registry.h): the prefill tiers decline what is not a
  // prefill, the fast tier's decode kernels decline what they do not own, the oracle
  // serves everything. The op cases count their declines by this order.
  const auto tiers = [](const std::string& op, std::vector<std::string> infixes) {
    std::vector<std::string> names;
    for (const std::string& infix : infixes)
      if (infix != "blas_" || kHaveBlas) names.push_back("cpu_" + infix + op);
    return names;
  };
  const std::vector<std::pair<std::string, std::vector<std::string>>> orders = {
      {"matmul", {"blas_", ""}},
      {"matmul_bt", {"bf16_", "blas_", ""}},
      {"quantized_matmul_bt", {"bf16_", "blas_", "fast_", ""}},
      {"quantized_matmul_bt_swiglu", {"bf16_", "fast_", ""}},
      {"paged_attention", {"bf16_", "blas_", "fast_", ""}},
      {"rms_norm", {"fast_", ""}},
  };
  for (const auto& [op, infixes] : orders) {
    CAPTURE(op);
    CHECK(ListProviders(op, DeviceType::kCPU) == tiers(op, infixes));
  }
}

TEST_CASE("cpu fast gemm: a prefill-sized matmul_bt is served by the selected GEMM, else by the oracle") {
  const Tensor a = RandomF32({64, 96}, 1), b = RandomF32({24, 96}, 2);
  // Against float64: f32 sums of 96 products (of bf16-rounded operands for the bf16 GEMM).
  const std::vector<double> av = ReadFloat(a), bv = ReadFloat(b);
  std::vector<double> ref(64 * 24);
  for (int64_t i = 0; i < 64; ++i)
    for (int64_t j = 0; j < 24; ++j) {
      double s = 0;
      for (int64_t p = 0; p < 96; ++p) s += av[i * 96 + p] * bv[j * 96 + p];
      ref[i * 24 + j] = s;
    }
  std::vector<PrefillGemm> gemms{PrefillGemm::kF32};
  if (cpu::fast::CpuHasAvx512Bf16()) gemms.push_back(PrefillGemm::kBf16);
  for (PrefillGemm gemm : gemms) {
    CAPTURE(cpu::fast::PrefillGemmName(gemm));
    setenv("METALRT_CPU_GEMM", cpu::fast::PrefillGemmName(gemm), 1);
    ResetProviderStats();
    const Tensor out = Poisoned({64, 24}, DType::kF32);
    ops::MatmulBT(a, b, out);
    unsetenv("METALRT_CPU_GEMM");
    const ProviderStats stats = GetProviderStats("matmul_bt", DeviceType::kCPU);
    const bool bf16 = gemm == PrefillGemm::kBf16;
    CHECK(stats.last_selected == (bf16 ? "cpu_bf16_matmul_bt" : kHaveBlas ? "cpu_blas_matmul_bt" : "cpu_matmul_bt"));
    CHECK(stats.calls == 1);
    CHECK(stats.declines == (bf16 ? 0u : 1u));   // the bf16 GEMM, tried first
    CHECK(Nmse(ReadFloat(out), ref) <= (bf16 ? kBf16Nmse : 1e-10));
  }
}

TEST_CASE("cpu fast gemm: METALRT_CPU_GEMM chooses f32, bf16 or auto; unset is auto (bf16 for coarse weights where the CPU has it)") {
  const bool has = cpu::fast::CpuHasAvx512Bf16();
  for (const char* value : {"", "auto"}) {
    CAPTURE(value);
    setenv("METALRT_CPU_GEMM", value, 1);
    CHECK(cpu::fast::SelectedPrefillGemm() == (has ? PrefillGemm::kAuto : PrefillGemm::kF32));
    CHECK(cpu::fast::PrefillGemmIsBf16(true) == has);   // quantized or bf16 weights
    CHECK_FALSE(cpu::fast::PrefillGemmIsBf16(false));   // an f32 or f16 matmul keeps its bar
  }
  unsetenv("METALRT_CPU_GEMM");
  CHECK(cpu::fast::SelectedPrefillGemm() == (has ? PrefillGemm::kAuto : PrefillGemm::kF32));
  setenv("METALRT_CPU_GEMM", "f32", 1);
  CHECK(cpu::fast::SelectedPrefillGemm() == PrefillGemm::kF32);
  CHECK_FALSE(cpu::fast::PrefillGemmIsBf16(true));
  setenv("METALRT_CPU_GEMM", "bf16", 1);
  if (has) {
    CHECK(cpu::fast::SelectedPrefillGemm() == PrefillGemm::kBf16);
    CHECK(cpu::fast::PrefillGemmIsBf16(false));
  } else {
    CHECK_THROWS_AS(cpu::fast::SelectedPrefillGemm(), std::invalid_argument);
  }
  setenv("METALRT_CPU_GEMM", "fp8", 1);
  CHECK_THROWS_WITH_AS(cpu::fast::SelectedPrefillGemm(), "METALRT_CPU_GEMM must be f32, bf16 or auto, got 'fp8'",
                       std::invalid_argument);
  unsetenv("METALRT_CPU_GEMM");
}

TEST_CASE("cpu fast gemm: with the prefill GEMMs disabled the oracle serves") {
  const Tensor x = RandomF32({40, 64}, 3);
  const WeightSpec s{QuantFormat::kQ4_1};
  const std::vector<Tensor> w = RandomWeight(s, 8, 64, 4);
  SetProviderEnabled("cpu_bf16_quantized_matmul_bt", false);
  if (kHaveBlas) SetProviderEnabled("cpu_blas_quantized_matmul_bt", false);
  ResetProviderStats();
  const Tensor out = Poisoned({40, 8}, DType::kF32);
  ops::QuantizedMatmulBT(x, WeightOf(s, 8, 64, w, 0), out);
  if (kHaveBlas) SetProviderEnabled("cpu_blas_quantized_matmul_bt", true);
  SetProviderEnabled("cpu_bf16_quantized_matmul_bt", true);
  const ProviderStats stats = GetProviderStats("quantized_matmul_bt", DeviceType::kCPU);
  CHECK(stats.last_selected == "cpu_quantized_matmul_bt");
  CHECK(stats.calls == 1);
  const std::vector<double> got = ReadFloat(out);
  CHECK(std::none_of(got.begin(), got.end(), [](double v) { return std::isnan(v); }));
}

TEST_CASE("cpu fast gemm: decode-sized m (up to kGemvMaxRows) is declined to the GEMV or the oracle") {
  for (int64_t m : {int64_t{1}, cpu::fast::kGemvMaxRows}) {
    CAPTURE(m);
    const Tensor a = RandomF32({m, 32}, 5), b = RandomF32({8, 32}, 6);
    ResetProviderStats();
    ops::MatmulBT(a, b, Poisoned({m, 8}, DType::kF32));
    const ProviderStats stats = GetProviderStats("matmul_bt", DeviceType::kCPU);
    CHECK(stats.last_selected != "cpu_blas_matmul_bt");
    CHECK(stats.last_selected != "cpu_bf16_matmul_bt");
    CHECK(stats.declines >= 1);
  }
}

TEST_CASE("cpu fast gemm: Q4_0, Q4_1 and Q8_0 decode straight to bf16 as the oracle's values rounded once") {
  if (!cpu::fast::CpuHasAvx512Bf16()) return;   // the decoders are AVX-512 code
  for (QuantFormat f : {QuantFormat::kQ4_0, QuantFormat::kQ4_1, QuantFormat::kQ8_0}) {
    CAPTURE(static_cast<int>(f));
    const WeightSpec s{f};
    const int64_t n = 5, k = 576;
    const std::vector<Tensor> tensors = RandomWeight(s, n, k, 901);
    const QuantizedTensor w = WeightOf(s, n, k, tensors, 0);
    REQUIRE(cpu::fast::DequantizesToBf16(w));
    std::vector<uint16_t> got(static_cast<size_t>(3 * k), 0xFFFF), want(static_cast<size_t>(3 * k));
    std::vector<float> row(static_cast<size_t>(k));
    cpu::fast::DequantizeRowsBf16Avx512(w, 2, 3, got.data());   // rows 2..4: an offset start
    for (int64_t r = 0; r < 3; ++r) {
      cpu::DequantizeRow(w, 2 + r, row.data());
      cpu::fast::RoundToBf16Avx512(row.data(), k, want.data() + r * k);
    }
    CHECK(got == want);
  }
  CHECK_FALSE(cpu::fast::DequantizesToBf16(WeightOf(WeightSpec{QuantFormat::kQ4_K}, 2, 256,
                                                    RandomWeight(WeightSpec{QuantFormat::kQ4_K}, 2, 256, 902), 0)));
}

TEST_CASE("cpu fast gemm: the bf16 GEMM and its SwiGLU epilogue give the same bytes on 1 and 2 threads") {
  if (!cpu::fast::CpuHasAvx512Bf16()) return;
  const WeightSpec s{QuantFormat::kQ4_1};
  const int64_t m = 33, k = 576, n = 260;   // 260 rows: partial panels of both providers
  const Tensor x = RandomF32({m, k}, 31);
  const std::vector<Tensor> tensors = RandomWeight(s, n, k, 32);
  const QuantizedTensor w = WeightOf(s, n, k, tensors, 0);
  auto run = [&](int threads, bool swiglu) {
    cpu::ScopedParallelThreadLimit limit(threads);
    ResetProviderStats();
    const Tensor out = Poisoned({m, swiglu ? n / 2 : n}, DType::kF32);
    if (swiglu) {
      ops::QuantizedMatmulBTSwiglu(x, w, out);
    } else {
      ops::QuantizedMatmulBT(x, w, out);
    }
    const char* op = swiglu ? "quantized_matmul_bt_swiglu" : "quantized_matmul_bt";
    CHECK(GetProviderStats(op, DeviceType::kCPU).last_selected == std::string("cpu_bf16_") + op);
    return std::vector<uint8_t>(out.data_as<uint8_t>(), out.data_as<uint8_t>() + out.nbytes());
  };
  for (bool swiglu : {false, true}) {
    CAPTURE(swiglu);
    CHECK(run(1, swiglu) == run(2, swiglu));
  }
}

TEST_CASE("cpu fast gemm: METALRT_CPU_AMX chooses the bf16 kernel; unset is AMX where the CPU has it") {
  if (!cpu::fast::CpuHasAvx512Bf16()) return;   // no bf16 GEMM to choose a kernel for
  const bool has = cpu::fast::CpuHasAmxBf16();
  MESSAGE("bf16 GEMM kernel on this CPU: " << std::string(has ? "amx_bf16" : "avx512_bf16"));
  const Bf16Kernel best = has ? Bf16Kernel::kAmxBf16 : Bf16Kernel::kAvx512Bf16;
  for (const char* value : {"", "auto"}) {
    CAPTURE(value);
    setenv("METALRT_CPU_AMX", value, 1);
    CHECK(cpu::fast::SelectedBf16Kernel() == best);
  }
  unsetenv("METALRT_CPU_AMX");
  CHECK(cpu::fast::SelectedBf16Kernel() == best);
  CHECK((cpu::fast::SelectedBf16Gemm(576) == (has ? cpu::fast::GemmBf16Amx : cpu::fast::GemmBf16Avx512)));
  // AMX steps through k 32 at a time: other even k stay on AVX-512 BF16.
  CHECK((cpu::fast::SelectedBf16Gemm(34) == cpu::fast::GemmBf16Avx512));
  setenv("METALRT_CPU_AMX", "off", 1);
  CHECK(cpu::fast::SelectedBf16Kernel() == Bf16Kernel::kAvx512Bf16);
  CHECK((cpu::fast::SelectedBf16Gemm(576) == cpu::fast::GemmBf16Avx512));
  setenv("METALRT_CPU_AMX", "on", 1);
  if (has) {
    CHECK(cpu::fast::SelectedBf16Kernel() == Bf16Kernel::kAmxBf16);
  } else {
    CHECK_THROWS_AS(cpu::fast::SelectedBf16Kernel(), std::invalid_argument);
  }
  setenv("METALRT_CPU_AMX", "yes", 1);
  CHECK_THROWS_WITH_AS(cpu::fast::SelectedBf16Kernel(), "METALRT_CPU_AMX must be on, off or auto, got 'yes'",
                       std::invalid_argument);
  unsetenv("METALRT_CPU_AMX");
}

TEST_CASE("cpu fast gemm: each bf16 kernel sums the bf16 products of exactly its [m, count] tile, at every edge") {
  if (!cpu::fast::CpuHasAvx512Bf16()) return;
  for (Bf16Kernel kernel : Bf16Kernels()) {
    const cpu::fast::Bf16GemmFn gemm =
        kernel == Bf16Kernel::kAmxBf16 ? cpu::fast::GemmBf16Amx : cpu::fast::GemmBf16Avx512;
    // m and count across 16-row tiles and 2 x 2 register blocks; k one and several AMX steps.
    for (int64_t m : {1, 15, 16, 17, 33, 64}) {
      for (int64_t count : {1, 15, 16, 17, 33, 48}) {
        for (int64_t k : {32, 96, 576}) {
          CAPTURE(cpu::fast::Bf16KernelName(kernel));
          CAPTURE(m);
          CAPTURE(count);
          CAPTURE(k);
          const std::vector<double> ad = RandomValues(static_cast<size_t>(m * k), static_cast<uint32_t>(m * 7 + k));
          const std::vector<double> wd = RandomValues(static_cast<size_t>(count * k), static_cast<uint32_t>(count + k));
          const std::vector<float> a(ad.begin(), ad.end()), wf(wd.begin(), wd.end());
          std::vector<uint16_t> w(wf.size()), a16(a.size());
          cpu::fast::RoundToBf16Avx512(wf.data(), static_cast<int64_t>(wf.size()), w.data());
          cpu::fast::RoundToBf16Avx512(a.data(), static_cast<int64_t>(a.size()), a16.data());
          std::vector<uint32_t> packed(static_cast<size_t>(cpu::fast::Bf16PackedSize(m, k)));
          cpu::fast::PackRowsBf16Avx512(a.data(), m, k, 0, (m + 15) / 16, packed.data());
          // c has 3 columns and 2 rows past the tile, which must keep their sentinel.
          const int64_t ldc = count + 3, rows = m + 2;
          const float sentinel = -12345.0f;
          std::vector<float> c(static_cast<size_t>(rows * ldc), sentinel);
          gemm(packed.data(), m, k, w.data(), count, c.data(), ldc, false);
          auto bf16 = [](uint16_t bits) {
            const uint32_t word = uint32_t{bits} << 16;
            float v;
            std::memcpy(&v, &word, sizeof v);
            return static_cast<double>(v);
          };
          double worst = 0;
          bool sentinels = true;
          for (int64_t i = 0; i < rows; ++i) {
            for (int64_t j = 0; j < ldc; ++j) {
              const float got = c[static_cast<size_t>(i * ldc + j)];
              if (i >= m || j >= count) {
                sentinels = sentinels && got == sentinel;
                continue;
              }
              double ref = 0, magnitude = 0;
              for (int64_t p = 0; p < k; ++p) {
                const double product = bf16(a16[static_cast<size_t>(i * k + p)]) * bf16(w[static_cast<size_t>(j * k + p)]);
                ref += product;
                magnitude += std::fabs(product);
              }
              // The products are exact in f32; only the f32 sums round (k of them).
              worst = std::max(worst, std::fabs(got - ref) / (magnitude * static_cast<double>(k) * 0x1p-24 + 1e-30));
            }
          }
          CHECK(sentinels);
          CHECK(worst <= 1.0);
        }
      }
    }
  }
}

TEST_CASE("cpu fast gemm: the bf16 activation packing puts pair p of row l of each block at word p * 16 + l") {
  if (!cpu::fast::CpuHasAvx512Bf16()) return;
  // m across 16-row blocks; k below, at and across the 32 values of a 16-pair step.
  for (int64_t m : {1, 15, 16, 17, 33}) {
    for (int64_t k : {2, 30, 32, 34, 96, 578}) {
      CAPTURE(m);
      CAPTURE(k);
      const std::vector<double> ad = RandomValues(static_cast<size_t>(m * k), static_cast<uint32_t>(m * 3 + k));
      const std::vector<float> a(ad.begin(), ad.end());
      std::vector<uint16_t> a16(a.size());
      cpu::fast::RoundToBf16Avx512(a.data(), static_cast<int64_t>(a.size()), a16.data());
      const int64_t blocks = (m + 15) / 16, pairs = k / 2;
      std::vector<uint32_t> packed(static_cast<size_t>(cpu::fast::Bf16PackedSize(m, k)), 0xDEADBEEFu);
      // Two calls over the blocks, as the threads split them.
      cpu::fast::PackRowsBf16Avx512(a.data(), m, k, 0, 1, packed.data());
      cpu::fast::PackRowsBf16Avx512(a.data(), m, k, 1, blocks, packed.data());
      bool exact = true;
      for (int64_t b = 0; b < blocks; ++b)
        for (int64_t p = 0; p < pairs; ++p)
          for (int64_t l = 0; l < 16; ++l) {
            const int64_t i = b * 16 + l;
            const uint32_t want = i < m ? (uint32_t{a16[static_cast<size_t>(i * k + 2 * p)]} |
                                           uint32_t{a16[static_cast<size_t>(i * k + 2 * p + 1)]} << 16)
                                        : 0u;
            exact = exact && packed[static_cast<size_t>((b * pairs + p) * 16 + l)] == want;
          }
      CHECK(exact);
    }
  }
}

TEST_CASE("cpu fast gemm: each bf16 kernel's accumulate continues a product split over k bit for bit") {
  if (!cpu::fast::CpuHasAvx512Bf16()) return;
  for (Bf16Kernel kernel : Bf16Kernels()) {
    const cpu::fast::Bf16GemmFn gemm =
        kernel == Bf16Kernel::kAmxBf16 ? cpu::fast::GemmBf16Amx : cpu::fast::GemmBf16Avx512;
    // k split at whole AMX steps into 1, 2 and 3 parts; m and count across tile edges.
    for (int64_t m : {15, 33}) {
      for (int64_t count : {17, 96}) {
        for (const std::vector<int64_t>& parts : {std::vector<int64_t>{256}, std::vector<int64_t>{64, 192},
                                                  std::vector<int64_t>{32, 128, 96}}) {
          CAPTURE(cpu::fast::Bf16KernelName(kernel));
          CAPTURE(m);
          CAPTURE(count);
          CAPTURE(parts.size());
          const int64_t k = 256, ldc = count + 1;
          const std::vector<double> ad = RandomValues(static_cast<size_t>(m * k), 71);
          const std::vector<double> wd = RandomValues(static_cast<size_t>(count * k), 72);
          const std::vector<float> a(ad.begin(), ad.end()), wf(wd.begin(), wd.end());
          // The whole product, then the parts: columns k0 .. k0 + part of a and w.
          auto product = [&](int64_t k0, int64_t part, float* c, bool accumulate) {
            std::vector<float> a_part(static_cast<size_t>(m * part)), w_part(static_cast<size_t>(count * part));
            for (int64_t i = 0; i < m; ++i) std::copy_n(&a[i * k + k0], part, &a_part[i * part]);
            for (int64_t j = 0; j < count; ++j) std::copy_n(&wf[j * k + k0], part, &w_part[j * part]);
            std::vector<uint16_t> w(w_part.size());
            cpu::fast::RoundToBf16Avx512(w_part.data(), static_cast<int64_t>(w.size()), w.data());
            std::vector<uint32_t> packed(static_cast<size_t>(cpu::fast::Bf16PackedSize(m, part)));
            cpu::fast::PackRowsBf16Avx512(a_part.data(), m, part, 0, (m + 15) / 16, packed.data());
            gemm(packed.data(), m, part, w.data(), count, c, ldc, accumulate);
          };
          std::vector<float> whole(static_cast<size_t>(m * ldc), -1.0f), split = whole;
          product(0, k, whole.data(), false);
          int64_t k0 = 0;
          for (int64_t part : parts) {
            product(k0, part, split.data(), k0 > 0);
            k0 += part;
          }
          CHECK(std::memcmp(whole.data(), split.data(), whole.size() * sizeof(float)) == 0);
        }
      }
    }
  }
}
