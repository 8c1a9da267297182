#include <doctest/doctest.h>

#include "metalrt/errors.h"
#include "metalrt/ops.h"
#include "op_testing.h"

using namespace metalrt;
using namespace metalrt::testing;

TEST_CASE("qkv_split: unequal widths, bit-exact, every float dtype") {
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
    for (int64_t tokens : {1, 33}) {
      CAPTURE(DTypeName(dtype));
      CAPTURE(tokens);
      const int64_t qw = 9 * 64, kw = 3 * 64, vw = 31;   // SmolLM2 q/k widths, an odd v
      const int64_t width = qw + kw + vw;
      const std::vector<double> values = RandomValues(static_cast<size_t>(tokens * width), 11, -4, 4);
      Tensor qkv = MakeFloat({tokens, width}, dtype, values);
      auto [q, k, v] = ops::QkvSplit(qkv, qw, kw, vw);
      CHECK(q.shape() == Shape{tokens, qw});
      CHECK(k.shape() == Shape{tokens, kw});
      CHECK(v.shape() == Shape{tokens, vw});
      const std::vector<uint8_t> src = Bytes(qkv);
      const size_t e = DTypeSize(dtype);
      const std::vector<uint8_t> parts[3] = {Bytes(q), Bytes(k), Bytes(v)};
      const int64_t begin[3] = {0, qw, qw + kw}, widths[3] = {qw, kw, vw};
      for (int p = 0; p < 3; ++p)
        for (int64_t t = 0; t < tokens; ++t)
          CHECK(std::memcmp(parts[p].data() + t * widths[p] * e,
                            src.data() + (t * width + begin[p]) * e, widths[p] * e) == 0);
    }
  }
}

TEST_CASE("qkv_split: bad inputs") {
  Tensor qkv = MakeFloat({2, 10}, DType::kF32, RandomValues(20, 1));
  CHECK_THROWS_WITH_AS(ops::QkvSplit(qkv, 4, 4, 4),
                       doctest::Contains("[qkv_split] q + k + v widths (4 + 4 + 4) must equal the last dim"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(ops::QkvSplit(qkv, 10, 0, 0), doctest::Contains("[qkv_split] widths must be positive"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(ops::QkvSplit(qkv.Reshape({20}), 4, 4, 2),
                       doctest::Contains("[qkv_split] qkv must have rank 2"), std::invalid_argument);
}
