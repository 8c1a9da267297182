#include <doctest/doctest.h>

#include "metalrt/errors.h"
#include "metalrt/ops.h"
#include "op_testing.h"

using namespace metalrt;
using namespace metalrt::testing;

namespace {

// A weight whose rows differ, so a wrong row cannot compare equal.
Tensor DistinctWeight(int64_t vocab, int64_t dim, DType dtype) {
  const size_t n = static_cast<size_t>(vocab * dim);
  if (IsFloating(dtype)) return MakeFloat({vocab, dim}, dtype, RandomValues(n, 7, -3, 3));
  std::vector<int8_t> ints(n);
  for (size_t i = 0; i < n; ++i) ints[i] = static_cast<int8_t>(i % 251 - 125);
  return MakeInts<int8_t>({vocab, dim}, dtype, ints);
}

}  // namespace

TEST_CASE("embedding: bit-exact row gather, every dtype, boundary widths") {
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16, DType::kI8}) {
    for (int64_t dim : {1, 31, 32, 33}) {
      CAPTURE(DTypeName(dtype));
      CAPTURE(dim);
      const int64_t vocab = 37;
      Tensor weight = DistinctWeight(vocab, dim, dtype);
      const std::vector<int32_t> ids = {0, 36, 5, 5, 17, 0, 36};
      Tensor out = Tensor::Empty({7, dim}, dtype, DeviceType::kCPU);
      Poison(out);
      ops::Embedding(weight, MakeInts<int32_t>({7}, DType::kI32, ids), out);
      const size_t row = static_cast<size_t>(dim) * DTypeSize(dtype);
      const std::vector<uint8_t> w = Bytes(weight), got = Bytes(out);
      for (size_t t = 0; t < ids.size(); ++t)
        CHECK(std::memcmp(got.data() + t * row, w.data() + ids[t] * row, row) == 0);
    }
  }
}

TEST_CASE("embedding: allocates its output; zero tokens") {
  Tensor weight = DistinctWeight(4, 8, DType::kBF16);
  Tensor out = ops::Embedding(weight, MakeInts<int32_t>({2}, DType::kI32, {3, 1}));
  CHECK(out.shape() == Shape{2, 8});
  CHECK(out.dtype() == DType::kBF16);
  CHECK(std::memcmp(out.data(), static_cast<char*>(weight.data()) + 3 * 16, 16) == 0);
  CHECK(ops::Embedding(weight, MakeInts<int32_t>({0}, DType::kI32, std::vector<int32_t>{}))
            .shape() == Shape{0, 8});
}

TEST_CASE("embedding: bad inputs") {
  Tensor weight = DistinctWeight(10, 4, DType::kF32);
  Tensor out = Tensor::Empty({3, 4}, DType::kF32, DeviceType::kCPU);
  Poison(out);
  CHECK_THROWS_WITH_AS(ops::Embedding(weight, MakeInts<int32_t>({3}, DType::kI32, {1, 10, 2}), out),
                       doctest::Contains("[embedding] id 10 at position 1 is outside the vocabulary of size 10"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(ops::Embedding(weight, MakeInts<int32_t>({1}, DType::kI32, {-1})),
                       doctest::Contains("id -1"), std::invalid_argument);
  CHECK(std::isnan(ReadFloat(out)[0]));   // nothing written before the bad id was found
  CHECK_THROWS_WITH_AS(ops::Embedding(weight, MakeInts<int64_t>({1}, DType::kI64, {1})),
                       doctest::Contains("[embedding] ids must be int32, got int64"), TypeError);
  CHECK_THROWS_WITH_AS(ops::Embedding(weight, MakeInts<int32_t>({1, 1}, DType::kI32, {1})),
                       doctest::Contains("[embedding] ids must have rank 1"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(ops::Embedding(weight.Reshape({40}), MakeInts<int32_t>({1}, DType::kI32, {1})),
                       doctest::Contains("[embedding] weight must have rank 2"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(ops::Embedding(weight, MakeInts<int32_t>({2}, DType::kI32, {1, 2}), weight.Slice(0, 0, 2)),
                       doctest::Contains("[embedding] out overlaps weight"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(ops::Embedding(weight, MakeInts<int32_t>({2}, DType::kI32, {1, 2}), out),
                       doctest::Contains("[embedding] out must have shape [2, 4], got [3, 4]"),
                       std::invalid_argument);
}
