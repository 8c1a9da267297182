#include <doctest/doctest.h>

#include "metalrt/errors.h"
#include "metalrt/ops.h"
#include "op_testing.h"

using namespace metalrt;
using namespace metalrt::testing;

namespace {

// Reference: the maximum over the non-NaN values, then the first index holding it.
int32_t ReferenceArgmax(const double* row, int64_t vocab) {
  double best = -std::numeric_limits<double>::infinity();
  bool any = false;
  for (int64_t v = 0; v < vocab; ++v)
    if (!std::isnan(row[v])) { best = any ? std::max(best, row[v]) : row[v]; any = true; }
  if (!any) return 0;
  for (int64_t v = 0; v < vocab; ++v)
    if (row[v] == best) return static_cast<int32_t>(v);
  return -1;
}

}  // namespace

TEST_CASE("greedy_argmax: vocab 50272, ties to the lowest index, NaN never wins") {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  const int64_t vocab = 50272, rows = 8;
  std::vector<double> x = RandomValues(static_cast<size_t>(rows * vocab), 21, -10, 10);
  auto row = [&](int64_t r) { return x.data() + r * vocab; };
  // Row 0: random. Row 1: a deliberate tie between 777 and 40000.
  row(1)[777] = row(1)[40000] = 50.0;
  // Row 2: all equal. Row 3: NaN at 0 and next to the maximum at the last index.
  std::fill(row(2), row(2) + vocab, 0.5);
  row(3)[0] = nan; row(3)[vocab - 2] = nan; row(3)[vocab - 1] = 60.0;
  // Row 4: only NaN. Row 5: only -inf. Row 6: NaN everywhere but index 12345.
  std::fill(row(4), row(4) + vocab, nan);
  std::fill(row(5), row(5) + vocab, -inf);
  std::fill(row(6), row(6) + vocab, nan); row(6)[12345] = -3.0;
  // Row 7: +inf twice.
  row(7)[100] = row(7)[200] = inf;
  const int32_t expected_fixed[8] = {-2, 777, 0, static_cast<int32_t>(vocab - 1), 0, 0, 12345, 100};

  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
    CAPTURE(DTypeName(dtype));
    Tensor logits = MakeFloat({rows, vocab}, dtype, x);
    const std::vector<double> stored = ReadFloat(logits);   // ties made by rounding count too
    Tensor out = Tensor::Empty({rows}, DType::kI32, DeviceType::kCPU);
    Poison(out);
    ops::GreedyArgmax(logits, out);
    for (int64_t r = 0; r < rows; ++r) {
      CAPTURE(r);
      const int32_t got = out.data_as<int32_t>()[r];
      CHECK(got == ReferenceArgmax(stored.data() + r * vocab, vocab));
      if (expected_fixed[r] >= 0) CHECK(got == expected_fixed[r]);
    }
  }
}

TEST_CASE("greedy_argmax: boundary vocab sizes and one row") {
  for (int64_t vocab : {1, 31, 32, 33}) {
    CAPTURE(vocab);
    const std::vector<double> x = RandomValues(static_cast<size_t>(vocab), 5);
    Tensor out = ops::GreedyArgmax(MakeFloat({1, vocab}, DType::kF32, x));
    CHECK(out.shape() == Shape{1});
    CHECK(out.dtype() == DType::kI32);
    CHECK(out.data_as<int32_t>()[0] == ReferenceArgmax(x.data(), vocab));
  }
}

TEST_CASE("greedy_argmax: bad inputs") {
  CHECK_THROWS_WITH_AS(ops::GreedyArgmax(MakeInts<int32_t>({1, 2}, DType::kI32, {1, 2})),
                       doctest::Contains("[greedy_argmax] logits must be float32, float16 or bfloat16"),
                       TypeError);
  CHECK_THROWS_WITH_AS(ops::GreedyArgmax(MakeFloat({4}, DType::kF32, RandomValues(4, 1))),
                       doctest::Contains("[greedy_argmax] logits must have rank 2"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(ops::GreedyArgmax(Tensor::Empty({2, 0}, DType::kF32, DeviceType::kCPU)),
                       doctest::Contains("[greedy_argmax] logits must have a non-empty vocabulary"),
                       std::invalid_argument);
  Tensor wrong_out = Tensor::Empty({2}, DType::kI64, DeviceType::kCPU);
  CHECK_THROWS_WITH_AS(ops::GreedyArgmax(MakeFloat({2, 3}, DType::kF32, RandomValues(6, 1)), wrong_out),
                       doctest::Contains("[greedy_argmax] out must be int32, got int64"), TypeError);
}
