// Gates of the CPU device's fast rms_norm (cpp/cpu/fast/rowwise/rms_norm.cpp): op cases against
// the oracle (the provider disabled) at the default model's width (576: one decode row,
// 7 rows, and 130 prefill rows that split over the threads), the 16-lane tail widths
// (1, 15, 16, 17, 33) and a wide odd row (4099); x (and the weight, which has x's dtype)
// in f32, f16 and bf16; then 1 vs 2 threads byte-identical.
//
// Bar: only the sum of squares differs from the oracle (16 lanes folded pairwise against
// one serial sum). Both sum positive terms, so each is within (n - 1) u of the exact sum
// (u = 2^-24); r = 1/sqrt(ss/n + eps) halves that relative error, so the f32 results are
// within ~0.5 (n + 16) u of each other relative: rel = (0.55 n + 8) u. An f16/bf16 output
// can round the other way by one ulp of its dtype (2^-10, 2^-7 relative).
#include <doctest/doctest.h>

#include <cstring>

#include "cpu/parallel.h"
#include "metalrt/op_registry.h"
#include "metalrt/ops.h"
#include "op_cases.h"

using namespace metalrt;
using namespace metalrt::testing;

namespace {

constexpr const char* kProvider = "cpu_fast_rms_norm";

double RelBar(int64_t n, DType out) {
  const double f32 = (0.55 * static_cast<double>(n) + 8.0) * std::ldexp(1.0, -24);
  return f32 + (out == DType::kF16 ? std::ldexp(1.0, -10) : out == DType::kBF16 ? std::ldexp(1.0, -7) : 0.0);
}

OpCase NormCase(int64_t m, int64_t n, DType dtype, uint32_t seed) {
  const Tensor x = MakeFloat({m, n}, dtype, RandomValuesOf(dtype, m * n, seed, -3.0, 3.0));
  const Tensor w = MakeFloat({n}, dtype, RandomValuesOf(dtype, n, seed + 1, -2.0, 2.0));
  OpCase c = SingleOutputCase(CaseName("rms_norm", dtype, {m, n}, "cpu_fast"), "rms_norm", "", {x, w},
                              {{m, n}, dtype}, {RelBar(n, dtype), 1e-30},
                              [](const Inputs& in, const Tensor& out) { ops::RmsNorm(in[0], in[1], 1e-5f, out); });
  c.provider = kProvider;
  c.device = DeviceType::kCPU;
  c.kernels.clear();
  c.nmse = dtype == DType::kF32 ? 1e-12 : 1e-6;
  return c;
}

}  // namespace

METALRT_OP_CASES(cpu_fast_rms_norm_cases) {
  std::vector<OpCase> cases;
  uint32_t seed = 16100;
  for (DType dtype : kFloatDTypes)
    for (int64_t m : {1, 7, 130}) cases.push_back(NormCase(m, 576, dtype, seed += 3));
  for (int64_t n : {1, 15, 16, 17, 33, 4099}) cases.push_back(NormCase(3, n, DType::kF32, seed += 3));
  return cases;
}

TEST_CASE("cpu fast rms_norm: the same bytes on one thread and on the pool") {
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    CAPTURE(DTypeName(dtype));
    const Tensor x = MakeFloat({130, 576}, dtype, RandomValuesOf(dtype, 130 * 576, 16201, -3.0, 3.0));
    const Tensor w = MakeFloat({576}, dtype, RandomValuesOf(dtype, 576, 16202));
    ResetProviderStats();
    Tensor one;
    {
      const cpu::ScopedParallelThreadLimit limit(1);
      one = ops::RmsNorm(x, w, 1e-5f);
    }
    const cpu::ScopedParallelThreadLimit limit(2);
    const Tensor pool = ops::RmsNorm(x, w, 1e-5f);
    CHECK(GetProviderStats("rms_norm", DeviceType::kCPU).last_selected == kProvider);
    REQUIRE(pool.nbytes() == one.nbytes());
    CHECK(std::memcmp(pool.data(), one.data(), one.nbytes()) == 0);
  }
}
