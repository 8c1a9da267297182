// Gates of the Metal greedy_argmax kernels (metal/greedy_argmax.metal): every float
// dtype, bit-exact against the CPU oracle through the op-case table, at OPT's
// (50,272) and SmolLM2's (49,152) vocabularies with R = 1 and R = 5, Llama 3's (128,256),
// vocabularies around the SIMD width, the 256-thread group and the 4,096-column chunk of
// one threadgroup (1, 2 and 3 chunks: the merge kernel), and rows built to break a wrong
// reduction: a tie inside one SIMD-group, a tie across SIMD-groups with the lower
// index in the later SIMD-group, a tie within one thread's columns, an all-equal row,
// NaNs sprinkled (also at the would-be maximum), rows of only NaN, of only -inf, and
// -inf mixed with NaN, +inf tied across SIMD-groups beside NaN, and ties across chunks.
#include <doctest/doctest.h>

#include <cmath>
#include <random>

#include "metal_op_testing.h"
#include "op_cases.h"

using namespace metalrt;
using namespace metalrt::testing;

namespace {

// Row r of the logits: normal values, then the pattern r % 11 selects. Thread t of a
// chunk's threadgroup reads columns t, t + 256, ... of its 4,096; SIMD-group s holds
// threads 32s .. 32s + 31.
std::vector<double> Row(int64_t r, int64_t vocab, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<double> normal(0.0, 3.0);
  std::vector<double> row(static_cast<size_t>(vocab));
  for (double& v : row) v = normal(gen);
  auto set = [&](int64_t i, double v) {
    if (i < vocab) row[static_cast<size_t>(i)] = v;
  };
  const double top = 40.0;
  switch (r % 11) {
    case 0: break;                                             // random (f16/bf16 rounding makes ties)
    case 1: set(1000, top); set(1010, top); break;            // threads 232, 242: one SIMD-group
    case 2: set(3100, top); set(3000, top); set(3 * 4096 + 1, top); break;   // thread 28 (group 0) vs 184 (group 5), chunk 3
    case 3: set(7 + 2560, top); set(7, top); break;           // one thread's two columns
    case 10: set(4096, top); set(4095, top); break;           // the last column of chunk 0, the first of 1
    case 4: std::fill(row.begin(), row.end(), 1.25); break;   // all equal: index 0
    case 5:                                                   // NaN everywhere 7 divides, and at the top
      for (int64_t i = 0; i < vocab; i += 7) set(i, NAN);
      set(vocab / 2, NAN);
      set(vocab / 2 + 1, top);
      set(vocab / 3, top * 2);
      set(vocab / 3, NAN);
      break;
    case 6: std::fill(row.begin(), row.end(), NAN); break;        // only NaN: 0
    case 7: std::fill(row.begin(), row.end(), -INFINITY); break;  // only -inf: 0
    case 8:                                                       // -inf after leading NaNs
      std::fill(row.begin(), row.end(), -INFINITY);
      for (int64_t i = 0; i < std::min<int64_t>(vocab, 40); ++i) set(i, NAN);
      break;
    case 9:                                                       // +inf twice, NaN and a top value first
      set(5, NAN);
      set(6, top);
      set(4000, INFINITY);
      set(3000, NAN);
      set(5 * 4096 + 2, INFINITY);
      set(29, INFINITY);
      break;
  }
  return row;
}

OpCase ArgmaxCase(DType dtype, int64_t rows, int64_t vocab, int64_t first_pattern, uint32_t seed,
                  const std::string& variant = "") {
  std::vector<double> values;
  for (int64_t r = 0; r < rows; ++r) {
    const std::vector<double> row = Row(first_pattern + r, vocab, seed + static_cast<uint32_t>(r));
    values.insert(values.end(), row.begin(), row.end());
  }
  return BitExact(SingleOutputCase(
      CaseName("greedy_argmax", dtype, {rows, vocab}, variant), "greedy_argmax",
      gpu::KernelName("greedy_argmax", "row", dtype), {MakeFloat({rows, vocab}, dtype, values)},
      {{rows}, DType::kI32}, {}, [](const Inputs& in, const Tensor& out) { ops::GreedyArgmax(in[0], out); }));
}

}  // namespace

METALRT_OP_CASES(greedy_argmax_cases) {
  std::vector<OpCase> cases;
  uint32_t seed = 1400;
  for (DType dtype : kFloatDTypes) {
    for (int64_t vocab : {50272, 49152}) {
      // Every pattern at the real vocabularies, five rows at a time, and one row alone.
      for (int64_t first = 0; first < 11; first += 5)
        cases.push_back(ArgmaxCase(dtype, 5, vocab, first, seed += 8, "patterns_from_" + std::to_string(first)));
      cases.push_back(ArgmaxCase(dtype, 1, vocab, 2, seed += 8, "decode"));
    }
    for (int64_t vocab : {1, 31, 32, 33, 255, 256, 257, 4096, 4097, 4099, 8193, 12289})
      cases.push_back(ArgmaxCase(dtype, 11, vocab, 0, seed += 16, "patterns"));
    cases.push_back(ArgmaxCase(dtype, 3, 128256, 8, seed += 8, "llama3"));
  }
  return cases;
}
