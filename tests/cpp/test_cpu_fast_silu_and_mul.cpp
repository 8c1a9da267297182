// Gates of the CPU device's fast silu_and_mul (cpp/cpu/fast/rowwise/silu_and_mul.cpp, its
// AVX-512 row in exp_avx512.cpp): op cases against the oracle (the provider disabled)
// at the default model's widths (n = 1536 at m = 1, 7, 33, 512 rows) and boundary widths
// (n = 1, 15, 16, 17, 33: the 16-lane tail mask), gate in [-20, 20]; then the edges of
// exp (overflow, underflow, infinities, NaN) against the oracle's formula.
//
// Bar: the vectorised exp is within 2 ulp of exp (Cephes expf's polynomial, relative
// error <= 2^-23, and the scaling exact), libm's expf within 1; the quotient and the
// product add 2 roundings each side, so |out - oracle| <= 1e-6 |oracle| (8 ulp) +1e-30.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "cpu/fast/simd/cpu_features.h"
#include "metalrt/op_registry.h"
#include "metalrt/ops.h"
#include "op_cases.h"

using namespace metalrt;
using namespace metalrt::testing;

namespace {

constexpr const char* kProvider = "cpu_fast_silu_and_mul";

bool Served() { return cpu::fast::SelectedGemvIsa() == cpu::fast::GemvIsa::kAvx512Vnni; }

OpCase SiluCase(int64_t m, int64_t n, uint32_t seed) {
  const Tensor gate_up = MakeFloat({m, 2 * n}, DType::kF32, RandomValuesOf(DType::kF32, m * 2 * n, seed, -20.0, 20.0));
  OpCase c = SingleOutputCase(CaseName("silu_and_mul", DType::kF32, {m, 2 * n}, "cpu_fast"), "silu_and_mul", "",
                              {gate_up}, {{m, n}, DType::kF32}, {1e-6, 1e-30},
                              [](const Inputs& in, const Tensor& out) { ops::SiluAndMul(in[0], out); });
  c.provider = kProvider;
  c.device = DeviceType::kCPU;
  c.kernels.clear();
  c.nmse = 1e-12;
  return c;
}

}  // namespace

METALRT_OP_CASES(cpu_fast_silu_and_mul_cases) {
  std::vector<OpCase> cases;
  if (!Served()) return cases;
  uint32_t seed = 15300;
  for (int64_t m : {1, 7, 33, 512}) cases.push_back(SiluCase(m, 1536, seed += 3));
  for (int64_t n : {1, 15, 16, 17, 33}) cases.push_back(SiluCase(3, n, seed += 3));
  return cases;
}

TEST_CASE("cpu fast silu_and_mul: exp's overflow, underflow, infinities and NaN as the oracle's formula") {
  if (!Served()) return;
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> gates{-1e4f, -104.0f, -100.0f, -89.0f, -88.0f, -20.0f, -1e-3f, -0.0f, 0.0f,
                                 1e-3f, 20.0f, 88.0f, 89.0f, 100.0f, 1e4f, -inf, inf, nan};
  const int64_t n = static_cast<int64_t>(gates.size());
  std::vector<double> values;
  for (float g : gates) values.push_back(g);
  for (int64_t i = 0; i < n; ++i) values.push_back(i == n - 2 ? nan : 1.5);   // up; one NaN
  ResetProviderStats();
  const Tensor out = Poisoned({1, n}, DType::kF32);
  ops::SiluAndMul(MakeFloat({1, 2 * n}, DType::kF32, values), out);
  CHECK(GetProviderStats("silu_and_mul", DeviceType::kCPU).last_selected == kProvider);
  const float* got = out.data_as<const float>();
  for (int64_t i = 0; i < n; ++i) {
    CAPTURE(gates[i]);
    const float up = static_cast<float>(values[n + i]);
    const float want = gates[i] / (1.0f + std::exp(-gates[i])) * up;   // cpu/silu_and_mul.cpp
    if (std::isnan(want)) {
      CHECK(std::isnan(got[i]));
    } else if (std::isinf(want) || want == 0.0f) {
      CHECK(got[i] == want);
      CHECK(std::signbit(got[i]) == std::signbit(want));
    } else {
      CHECK(std::abs(got[i] - want) <= 1e-6 * std::abs(want) + 1e-30);
    }
  }
}
