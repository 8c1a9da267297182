// Gates of the CPU device's fast greedy_argmax (cpp/cpu/fast/rowwise/greedy_argmax.cpp), bit-exact
// against the oracle (the provider disabled): the default model's vocabulary (49,152),
// the 16-lane and 2,048-element block edges (1, 15, 16, 17, 33, 2047, 2048, 2049, 4099),
// f32/f16/bf16 logits, and rows built to catch a wrong tie or NaN rule: ties (the lowest
// index wins), -0 against +0, NaN first, last and next to the maximum, only NaN, only
// -inf, -inf among NaN, +inf twice, all equal; then 1 vs 2 threads byte-identical.
#include <doctest/doctest.h>

#include <cstring>
#include <limits>

#include "cpu/parallel.h"
#include "metalrt/op_registry.h"
#include "metalrt/ops.h"
#include "op_cases.h"

using namespace metalrt;
using namespace metalrt::testing;

namespace {

constexpr const char* kProvider = "cpu_fast_greedy_argmax";
constexpr int64_t kRows = 12;

// Row r of kRows special rows of `vocab` logits.
std::vector<double> SpecialRows(int64_t vocab, uint32_t seed) {
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  std::vector<double> x = RandomValues(static_cast<size_t>(kRows * vocab), seed, -10.0, 10.0);
  auto row = [&](int64_t r) { return x.data() + r * vocab; };
  const int64_t last = vocab - 1, mid = vocab / 2;
  // 0: random. 1: a tie between mid and last (and 0 when mid is 0).
  row(1)[mid] = row(1)[last] = 50.0;
  // 2: all equal. 3: NaN at 0 and before a maximum at the last index.
  std::fill(row(2), row(2) + vocab, 0.5);
  row(3)[0] = nan;
  if (vocab > 1) row(3)[last - 1] = nan;
  row(3)[last] = 60.0;
  // 4: only NaN. 5: only -inf. 6: NaN but -inf at mid and last.
  std::fill(row(4), row(4) + vocab, nan);
  std::fill(row(5), row(5) + vocab, -inf);
  std::fill(row(6), row(6) + vocab, nan);
  row(6)[mid] = row(6)[last] = -inf;
  // 7: +inf twice. 8: -0 at last, +0 at mid, everything else negative.
  row(7)[mid] = row(7)[last] = inf;
  for (int64_t v = 0; v < vocab; ++v) row(8)[v] = -1.0 - std::fabs(row(8)[v]);
  row(8)[last] = -0.0;
  row(8)[mid] = 0.0;
  // 9: NaN everywhere but one value. 10: NaN at the maximum's neighbours, max at mid.
  std::fill(row(9), row(9) + vocab, nan);
  row(9)[(mid * 3) % vocab] = -3.0;
  row(10)[mid] = 99.0;
  if (mid > 0) row(10)[mid - 1] = nan;
  if (mid < last) row(10)[mid + 1] = nan;
  // 11: ties made by the dtype's rounding (values close together).
  for (int64_t v = 0; v < vocab; ++v) row(11)[v] = 7.0 + 1e-4 * row(11)[v];
  return x;
}

OpCase ArgmaxCase(int64_t vocab, DType dtype, uint32_t seed) {
  OpCase c;
  c.name = CaseName("greedy_argmax", dtype, {kRows, vocab}, "cpu_fast");
  c.op = "greedy_argmax";
  c.provider = kProvider;
  c.device = DeviceType::kCPU;
  c.inputs = {MakeFloat({kRows, vocab}, dtype, SpecialRows(vocab, seed))};
  c.outputs = {{{kRows}, DType::kI32}};
  c.run = [](const Inputs& in, const Outputs& out) {
    ops::GreedyArgmax(in[0], out[0]);
    return Returned{};
  };
  return BitExact(c);
}

}  // namespace

METALRT_OP_CASES(cpu_fast_greedy_argmax_cases) {
  std::vector<OpCase> cases;
  uint32_t seed = 16300;
  for (DType dtype : kFloatDTypes) cases.push_back(ArgmaxCase(49152, dtype, seed += 3));
  for (int64_t vocab : {1, 15, 16, 17, 33, 2047, 2048, 2049, 4099})
    cases.push_back(ArgmaxCase(vocab, DType::kF32, seed += 3));
  cases.push_back(ArgmaxCase(2049, DType::kBF16, seed += 3));
  return cases;
}

TEST_CASE("cpu fast greedy_argmax: the same indices on one thread and on the pool") {
  const Tensor logits = MakeFloat({kRows, 49152}, DType::kF32, SpecialRows(49152, 16400));
  ResetProviderStats();
  Tensor one;
  {
    const cpu::ScopedParallelThreadLimit limit(1);
    one = ops::GreedyArgmax(logits);
  }
  const cpu::ScopedParallelThreadLimit limit(2);
  const Tensor pool = ops::GreedyArgmax(logits);
  CHECK(GetProviderStats("greedy_argmax", DeviceType::kCPU).last_selected == kProvider);
  CHECK(std::memcmp(pool.data(), one.data(), one.nbytes()) == 0);
}
