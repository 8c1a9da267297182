// Gates of the fast CPU quantized GEMV (cpp/cpu/fast, provider
// cpu_fast_quantized_matmul_bt) in the op-case table against the oracle
// (cpu_quantized_matmul_bt): every format and affine width, at the default model's
// shapes (K = 576, 1536; N = 576, 192, 1536, 3072, 49152) and at boundaries (m = 1, 7,
// 16; K = 32, 256; N = 1, 3), on 1 and 2 threads, NaN-poisoned outputs, the provider
// stats proving the fast provider served. Bar: the two-byte int8 activations
// (q8_activation.h) give, against the oracle's f32 dot, NMSE <= 1e-7 and every element
// within 2e-4 of the output's largest magnitude for f32 outputs (measured: 4e-9 and
// 5e-5 at worst); f16/bf16 outputs add a rounding of their own: NMSE <= 1e-6 and 4 unit
// roundoffs, as the Metal GEMV's gate (docs/cpu.md).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <cstdlib>
#include <limits>

#include "cpu/fast/simd/cpu_features.h"
#include "cpu_isa_testing.h"
#include "cpu/fast/gemv/matmul_dispatch.h"
#include "cpu/fast/prefill/prefill_gemm.h"
#include "cpu/parallel.h"
#include "metalrt/op_registry.h"
#include "metalrt/ops.h"
#include "op_cases.h"
#include "quantized_testing.h"

using namespace metalrt;
using namespace metalrt::testing;

namespace {

constexpr const char* kFast = "cpu_fast_quantized_matmul_bt";
constexpr const char* kOracle = "cpu_quantized_matmul_bt";
constexpr double kNmseBar = 1e-7, kMaxRelBar = 2e-4;   // f32 outputs

std::vector<WeightSpec> Specs() {
  std::vector<WeightSpec> specs = GgufSpecsAnd({{QuantFormat::kAffine, 4, 64, DType::kBF16},
                                                {QuantFormat::kAffine, 8, 64, DType::kF32}, kMxfp4Spec});
  for (int bits : {2, 3, 4, 5, 6, 8}) specs.push_back({QuantFormat::kAffine, bits, 32, DType::kF16});
  return specs;
}

// The K granule a spec needs: its block (32 or 256) or scale group.
int64_t Granule(const WeightSpec& s) { return HasScales(s) ? s.group_size : BlockValues(s.format); }

struct Shape3 {
  int64_t m, k, n;
};

// The default model's decode products (q|k|v, o, gate|up, down, lm_head) and the
// boundaries; shapes whose K the spec's granule does not divide are left out (K-quants
// take 256 and 512 instead of 32 and 576).
std::vector<Shape3> ShapesFor(const WeightSpec& s) {
  std::vector<Shape3> shapes = {{1, 576, 576},  {1, 576, 192}, {1, 576, 3072}, {1, 1536, 576},
                                {1, 576, 49152}, {7, 576, 3},  {16, 1536, 1},  {16, 32, 1536},
                                {1, 32, 3},      {7, 256, 49152}, {16, 512, 192}};
  std::vector<Shape3> kept;
  for (const Shape3& sh : shapes)
    if (sh.k % Granule(s) == 0) kept.push_back(sh);
  return kept;
}

OpCase FastCase(const WeightSpec& s, Shape3 sh, DType dtype, int threads, uint32_t seed) {
  const Tensor x = MakeFloat({sh.m, sh.k}, dtype, RandomValuesOf(dtype, sh.m * sh.k, seed));
  std::vector<Tensor> inputs{x};
  for (const Tensor& t : RandomWeight(s, sh.n, sh.k, seed + 1)) inputs.push_back(t);
  OpCase c;
  c.name = CaseName("quantized_matmul_bt", dtype, {sh.m, sh.k, sh.n}, "cpu_fast_" + SpecName(s) + "_t" +
                                                                          std::to_string(threads));
  c.op = "quantized_matmul_bt";
  c.provider = kFast;
  c.device = DeviceType::kCPU;
  c.inputs = inputs;
  c.outputs = {{{sh.m, sh.n}, dtype}};
  c.run = [s, sh, threads](const Inputs& in, const Outputs& out) {
    const cpu::ScopedParallelThreadLimit limit(threads);
    ops::QuantizedMatmulBT(in[0], WeightOf(s, sh.n, sh.k, in, 1), out[0]);
    return Returned{};
  };
  c.nmse = dtype == DType::kF32 ? kNmseBar : 1e-6;
  c.max_rel = dtype == DType::kF32 ? kMaxRelBar : 4 * UnitRoundoff(dtype);
  return c;
}

}  // namespace

METALRT_OP_CASES(cpu_fast_quantized_cases) {
  std::vector<OpCase> cases;
  uint32_t seed = 300;
  for (const WeightSpec& s : Specs())
    for (const Shape3& sh : ShapesFor(s))
      for (int threads : {1, 2}) cases.push_back(FastCase(s, sh, DType::kF32, threads, seed += 2));
  // Half-precision activations and outputs (the model's own dtypes).
  for (DType dtype : {DType::kF16, DType::kBF16}) {
    cases.push_back(FastCase({QuantFormat::kQ4_1}, {1, 576, 576}, dtype, 2, seed += 2));
    cases.push_back(FastCase({QuantFormat::kQ6_K}, {16, 512, 3}, dtype, 2, seed += 2));
  }
  // MXFP4 at gpt-oss-20b's decode shapes: q (2880 -> 4096), o (4096 -> 2880), an expert.
  for (const WeightSpec& s : {kMxfp4Spec, WeightSpec{QuantFormat::kMxfp4Gguf}}) {
    cases.push_back(FastCase(s, {1, 2880, 4096}, DType::kF32, 2, seed += 2));
    cases.push_back(FastCase(s, {1, 4096, 2880}, DType::kBF16, 2, seed += 2));
    cases.push_back(FastCase(s, {4, 2880, 2880}, DType::kF32, 1, seed += 2));
  }
  return cases;
}

namespace {

QuantizedTensor Q41Weight(int64_t n, int64_t k, std::vector<Tensor>* keep) {
  const WeightSpec s{QuantFormat::kQ4_1};
  *keep = RandomWeight(s, n, k, 77);
  return WeightOf(s, n, k, *keep, 0);
}

}  // namespace

TEST_CASE("cpu fast quantized_matmul_bt: the 2-thread chunks exist, so the _t2 cases run two threads") {
  // The case table's _t2 cases prove the split only if the pool has a second thread.
  CHECK(cpu::ParallelThreadCount() >= 2);
}

TEST_CASE("cpu fast quantized_matmul_bt: m above kGemvMaxRows and a NaN x are declined to the oracle") {
  std::vector<Tensor> keep;
  const QuantizedTensor w = Q41Weight(40, 64, &keep);
  const int64_t m = cpu::fast::kGemvMaxRows + 1;
  const Tensor x = MakeFloat({m, 64}, DType::kF32, RandomValues(m * 64, 5));
  ResetProviderStats();
  ops::QuantizedMatmulBT(x, w, Poisoned({m, 40}, DType::kF32));
  ProviderStats stats = GetProviderStats("quantized_matmul_bt", DeviceType::kCPU);
  // Past the GEMV's rows the prefill GEMM serves (cpp/cpu/fast/prefill: the bf16 GEMM
  // where selected, else the sgemm where the build has a BLAS); tried ahead of the GEMV,
  // both decline the m = 1 call below.
  const bool blas = std::strcmp(METALRT_BLAS_NAME, "none") != 0;
  const bool bf16 = cpu::fast::PrefillGemmIsBf16(true);
  CHECK(stats.last_selected == (bf16 ? "cpu_bf16_quantized_matmul_bt" : blas ? "cpu_blas_quantized_matmul_bt" : kOracle));
  // The bf16 GEMM when not selected; the sgemm (where built) and the GEMV when neither serves.
  const uint64_t declined = bf16 ? 0 : blas ? 1 : 2;
  CHECK(stats.declines == declined);

  std::vector<double> values = RandomValues(64, 6);
  values[3] = std::numeric_limits<double>::quiet_NaN();
  const Tensor out = Poisoned({1, 40}, DType::kF32);
  std::memset(out.data(), 0, out.nbytes());
  ops::QuantizedMatmulBT(MakeFloat({1, 64}, DType::kF32, values), w, out);
  stats = GetProviderStats("quantized_matmul_bt", DeviceType::kCPU);
  CHECK(stats.last_selected == kOracle);
  CHECK(stats.declines == declined + (blas ? 3u : 2u));   // the prefill GEMMs and the GEMV (the NaN)
  for (double v : ReadFloat(out)) CHECK(std::isnan(v));   // the oracle propagates it to every output
}

TEST_CASE("cpu fast quantized_matmul_bt: with the fast provider disabled the oracle serves, bit for bit") {
  std::vector<Tensor> keep;
  const QuantizedTensor w = Q41Weight(70, 576, &keep);
  const Tensor x = MakeFloat({1, 576}, DType::kF32, RandomValues(576, 8));
  ResetProviderStats();
  const std::vector<double> fast = ReadFloat(ops::QuantizedMatmulBT(x, w, Poisoned({1, 70}, DType::kF32)));
  CHECK(GetProviderStats("quantized_matmul_bt", DeviceType::kCPU).last_selected == kFast);
  SetProviderEnabled(kFast, false);
  const std::vector<double> oracle = ReadFloat(ops::QuantizedMatmulBT(x, w, Poisoned({1, 70}, DType::kF32)));
  const ProviderStats stats = GetProviderStats("quantized_matmul_bt", DeviceType::kCPU);
  SetProviderEnabled(kFast, true);
  CHECK(stats.last_selected == kOracle);
  // Disabled, not declined; the prefill GEMMs (bf16, and the sgemm where built), tried
  // first, decline m = 1 in both calls.
  CHECK(stats.declines == (std::strcmp(METALRT_BLAS_NAME, "none") != 0 ? 4u : 2u));
  // The oracle's own result: dequantize, then the f64 dot, within f32 rounding.
  const std::vector<double> dense = ReadFloat(ops::Dequantize(w)), xs = ReadFloat(x);
  std::vector<double> want(70, 0.0);
  for (int n = 0; n < 70; ++n)
    for (int k = 0; k < 576; ++k) want[n] += xs[k] * dense[n * 576 + k];
  CHECK(Nmse(oracle, want) < 1e-12);
  CHECK(Nmse(fast, want) > 1e-16);   // the int8 activations round: the two paths really differ
  CHECK(Nmse(fast, want) < kNmseBar);
}

TEST_CASE("cpu fast quantized_matmul_bt: every kernel this CPU can run meets the bar (METALRT_CPU_ISA)") {
  MESSAGE("best GEMV kernel on this CPU: " << cpu::fast::GemvIsaName(cpu::fast::SelectedGemvIsa()));
  for (const WeightSpec& s : Specs()) {
    // n = 37: nine groups of the AVX-512 m = 1 kernel's 4 weight rows (Q8_0; Q4_0,
    // Q4_1 and MXFP4 take 8: four passes and a tail of five).
    const int64_t k = 512, n = 37;
    const std::vector<Tensor> t = RandomWeight(s, n, k, 91);
    const QuantizedTensor w = WeightOf(s, n, k, t, 0);
    for (int64_t m : {1, 3}) {
      const Tensor x = MakeFloat({m, k}, DType::kF32, RandomValues(m * k, 92));
      SetProviderEnabled(kFast, false);
      const std::vector<double> oracle = ReadFloat(ops::QuantizedMatmulBT(x, w));
      SetProviderEnabled(kFast, true);
      for (cpu::fast::GemvIsa isa : RunnableIsas()) {
        CAPTURE(SpecName(s));
        CAPTURE(m);
        CAPTURE(cpu::fast::GemvIsaName(isa));
        setenv("METALRT_CPU_ISA", cpu::fast::GemvIsaName(isa), 1);
        cpu::fast::ResetCpuSelections();   // the choice is kept between calls
        const std::vector<double> got = ReadFloat(ops::QuantizedMatmulBT(x, w, Poisoned({m, n}, DType::kF32)));
        unsetenv("METALRT_CPU_ISA");
        cpu::fast::ResetCpuSelections();
        CHECK(Nmse(got, oracle) < kNmseBar);
      }
    }
  }
  setenv("METALRT_CPU_ISA", "sse9", 1);
  cpu::fast::ResetCpuSelections();
  CheckThrows<std::invalid_argument>([] { cpu::fast::SelectedGemvIsa(); },
                                     "METALRT_CPU_ISA must be one of portable, avx2, avx512_vnni, neon, got 'sse9'");
  unsetenv("METALRT_CPU_ISA");
  cpu::fast::ResetCpuSelections();
}

TEST_CASE("cpu fast quantized_matmul_bt: MXFP4 takes every finite E8M0 scale as the oracle, on every kernel") {
  // Every block of the weight has exponent e; e = 0, 1 are the subnormal scales
  // 2^-128, 2^-127 (mxfp4_values.h), and from e = 253 on a code of 6 overflows f32 in
  // the oracle's dequantization, so those are left out. x is scaled by 2^(127 - e)
  // (within 2^+-90, where its int8 rounding keeps its step normal) so y stays a
  // normal f32. n = 9: a pass of the AVX-512 m = 1 kernel's eight rows and a tail row.
  const int64_t k = 64, n = 9;
  for (const WeightSpec& s : {kMxfp4Spec, WeightSpec{QuantFormat::kMxfp4Gguf}}) {
    std::vector<Tensor> t = RandomWeight(s, n, k, 95);
    for (int e = 0; e <= 252; ++e) {
      if (s.format == QuantFormat::kMxfp4) {
        std::memset(t[1].data(), e, t[1].nbytes());
      } else {
        for (int64_t b = 0; b < n * (k / 32); ++b) t[0].data_as<uint8_t>()[b * 17] = static_cast<uint8_t>(e);
      }
      const QuantizedTensor w = WeightOf(s, n, k, t, 0);
      std::vector<double> values = RandomValues(k, 96);
      for (double& v : values) v = std::ldexp(v, std::clamp(127 - e, -90, 90));
      const Tensor x = MakeFloat({1, k}, DType::kF32, values);
      SetProviderEnabled(kFast, false);
      const std::vector<double> oracle = ReadFloat(ops::QuantizedMatmulBT(x, w));
      SetProviderEnabled(kFast, true);
      for (cpu::fast::GemvIsa isa : RunnableIsas()) {
        CAPTURE(SpecName(s));
        CAPTURE(e);
        CAPTURE(cpu::fast::GemvIsaName(isa));
        setenv("METALRT_CPU_ISA", cpu::fast::GemvIsaName(isa), 1);
        cpu::fast::ResetCpuSelections();
        const std::vector<double> got = ReadFloat(ops::QuantizedMatmulBT(x, w, Poisoned({1, n}, DType::kF32)));
        unsetenv("METALRT_CPU_ISA");
        cpu::fast::ResetCpuSelections();
        CHECK(GetProviderStats("quantized_matmul_bt", DeviceType::kCPU).last_selected == kFast);
        CHECK(Nmse(got, oracle) < kNmseBar);
      }
    }
  }
}

TEST_CASE("cpu fast quantized_matmul_bt: the same bytes on one thread and on two, every format and kernel") {
  // The AVX-512 m = 1 kernels take weight rows 8 (Q4_0, Q4_1, MXFP4) or 4 (Q8_0) at a time from
  // the start of their chunk; n = 150 splits at row 75 on two threads, so the groups differ
  // from one thread's and only a per-row arithmetic independent of the grouping gives
  // the same bytes.
  const int64_t k = 512, n = 150;
  for (const WeightSpec& s : Specs()) {
    const std::vector<Tensor> t = RandomWeight(s, n, k, 93);
    const QuantizedTensor w = WeightOf(s, n, k, t, 0);
    for (int64_t m : {1, 3}) {
      const Tensor x = MakeFloat({m, k}, DType::kF32, RandomValues(m * k, 94));
      for (cpu::fast::GemvIsa isa : RunnableIsas()) {
        CAPTURE(SpecName(s));
        CAPTURE(m);
        CAPTURE(cpu::fast::GemvIsaName(isa));
        setenv("METALRT_CPU_ISA", cpu::fast::GemvIsaName(isa), 1);
        cpu::fast::ResetCpuSelections();
        Tensor one = Poisoned({m, n}, DType::kF32), two = Poisoned({m, n}, DType::kF32);
        {
          const cpu::ScopedParallelThreadLimit limit(1);
          ops::QuantizedMatmulBT(x, w, one);
        }
        {
          const cpu::ScopedParallelThreadLimit limit(2);
          ops::QuantizedMatmulBT(x, w, two);
        }
        unsetenv("METALRT_CPU_ISA");
        cpu::fast::ResetCpuSelections();
        CHECK(GetProviderStats("quantized_matmul_bt", DeviceType::kCPU).last_selected == kFast);
        CHECK(std::memcmp(one.data(), two.data(), one.nbytes()) == 0);
      }
    }
  }
}
