#include <doctest/doctest.h>

#include "metalrt/errors.h"
#include "metalrt/ops.h"
#include "op_testing.h"

using namespace metalrt;
using namespace metalrt::testing;

namespace {

// float64 RoPE of a [T, heads, head_dim] array: pair (ia, ib) of feature pair i is
// rotated by angle position * base^(-2i / rotary_dim).
std::vector<double> ReferenceRope(const std::vector<double>& x, const std::vector<int32_t>& pos,
                                  int64_t heads, int64_t head_dim, int64_t rotary_dim, double base,
                                  bool neox) {
  std::vector<double> y = x;
  const int64_t half = rotary_dim / 2;
  for (size_t t = 0; t < pos.size(); ++t)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t i = 0; i < half; ++i) {
        const double theta = pos[t] * std::pow(base, -2.0 * static_cast<double>(i) / rotary_dim);
        const size_t row = (t * heads + h) * head_dim;
        const size_t ia = row + (neox ? i : 2 * i), ib = row + (neox ? i + half : 2 * i + 1);
        y[ia] = x[ia] * std::cos(theta) - x[ib] * std::sin(theta);
        y[ib] = x[ib] * std::cos(theta) + x[ia] * std::sin(theta);
      }
  return y;
}

// Positions from 0 to 131072 (the long-context range where float angles fail).
const std::vector<int32_t> kPositions = {0, 1, 7, 31, 4095, 65535, 100003, 131071, 131072};

struct RopeCase { int64_t heads, head_dim, rotary_dim; double base; };
const RopeCase kCases[] = {
    {9, 64, 64, 1e5},      // SmolLM2
    {3, 128, 128, 1e6},    // Qwen3 (k heads)
    {2, 80, 32, 1e4},      // partial rotary, pass-through dims
    {1, 33, 2, 1e4},       // one pair, odd head_dim
};

}  // namespace

TEST_CASE("rope_neox / rope_interleaved: float64 reference at positions up to 131072") {
  for (bool neox : {true, false}) {
    for (const RopeCase& c : kCases) {
      for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
        CAPTURE(neox);
        CAPTURE(c.head_dim);
        CAPTURE(c.rotary_dim);
        CAPTURE(DTypeName(dtype));
        const int64_t tokens = static_cast<int64_t>(kPositions.size());
        const Shape shape = {tokens, c.heads, c.head_dim};
        Tensor x = MakeFloat(shape, dtype, RandomValues(tokens * c.heads * c.head_dim, 17, -2, 2));
        const std::vector<double> xs = ReadFloat(x);
        const std::vector<double> ref =
            ReferenceRope(xs, kPositions, c.heads, c.head_dim, c.rotary_dim, c.base, neox);
        Tensor out = Tensor::Empty(shape, dtype, DeviceType::kCPU);
        Poison(out);
        Tensor pos = MakeInts<int32_t>({tokens}, DType::kI32, kPositions);
        const float base = static_cast<float>(c.base);
        if (neox) ops::RopeNeox(x, pos, c.rotary_dim, base, out);
        else ops::RopeInterleaved(x, pos, c.rotary_dim, base, out);
        const std::vector<double> got = ReadFloat(out);
        // Per element: output rounding, plus a few f32 roundings of |a| + |b| (cos/sin
        // rounded to f32, two products and a sum).
        const double u = UnitRoundoff(dtype), u32 = UnitRoundoff(DType::kF32);
        int bad = 0;
        for (size_t i = 0; i < ref.size(); ++i)
          if (!(std::abs(got[i] - ref[i]) <= u * std::abs(ref[i]) + 8 * u32 * 4.0)) ++bad;
        CHECK(bad == 0);
        CHECK(Nmse(got, ref) <= (dtype == DType::kF32 ? 1e-12 : 4 * u * u));
        // Pass-through features are bit-exact; position 0 is the identity.
        for (size_t i = 0; i < ref.size(); ++i)
          if (static_cast<int64_t>(i % c.head_dim) >= c.rotary_dim) CHECK(got[i] == xs[i]);
        CHECK(Nmse(got, xs) > 1e-3);   // the op did rotate
      }
    }
  }
}

TEST_CASE("rope_neox: in place (out = x) equals out of place") {
  Tensor pos = MakeInts<int32_t>({9}, DType::kI32, kPositions);
  Tensor x = MakeFloat({9, 4, 64}, DType::kBF16, RandomValues(9 * 4 * 64, 3));
  Tensor fresh = ops::RopeNeox(x, pos, 48, 1e4f);
  ops::RopeNeox(x, pos, 48, 1e4f, x);
  CHECK(Bytes(x) == Bytes(fresh));
}

TEST_CASE("rope_cos_sin_cache: cos | sin rows within f32 rounding of float64") {
  const int64_t tokens = static_cast<int64_t>(kPositions.size());
  for (const RopeCase& c : kCases) {
    CAPTURE(c.rotary_dim);
    Tensor out = Tensor::Empty({tokens, c.rotary_dim}, DType::kF32, DeviceType::kCPU);
    Poison(out);
    ops::RopeCosSinCache(MakeInts<int32_t>({tokens}, DType::kI32, kPositions), c.rotary_dim,
                         static_cast<float>(c.base), out);
    const int64_t half = c.rotary_dim / 2;
    double worst = 0;
    for (int64_t t = 0; t < tokens; ++t)
      for (int64_t i = 0; i < half; ++i) {
        const double theta = kPositions[t] * std::pow(c.base, -2.0 * static_cast<double>(i) / c.rotary_dim);
        const float* row = out.data_as<float>() + t * c.rotary_dim;
        worst = std::max({worst, std::abs(row[i] - std::cos(theta)), std::abs(row[half + i] - std::sin(theta))});
      }
    CHECK(worst <= std::ldexp(1.0, -24));   // half an ulp of values below 1
  }
}

TEST_CASE("rope_from_cache: bit-exact with rope_neox and rope_interleaved, rows by index") {
  // A cache of positions 0..P-1 applied by row index equals RoPE at those positions.
  const int64_t rows = 40, rotary_dim = 48;
  std::vector<int32_t> all(rows);
  for (int32_t p = 0; p < rows; ++p) all[p] = p;
  Tensor cache = ops::RopeCosSinCache(MakeInts<int32_t>({rows}, DType::kI32, all), rotary_dim, 1e4f);
  const std::vector<int32_t> picks = {39, 0, 17, 17, 1};
  Tensor pos = MakeInts<int32_t>({5}, DType::kI32, picks);
  for (bool neox : {true, false}) {
    for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
      CAPTURE(neox);
      CAPTURE(DTypeName(dtype));
      Tensor x = MakeFloat({5, 3, 64}, dtype, RandomValues(5 * 3 * 64, 8));
      Tensor out = Tensor::Empty({5, 3, 64}, dtype, DeviceType::kCPU);
      Poison(out);
      ops::RopeFromCache(x, cache, pos, neox, out);
      Tensor direct = neox ? ops::RopeNeox(x, pos, rotary_dim, 1e4f)
                           : ops::RopeInterleaved(x, pos, rotary_dim, 1e4f);
      CHECK(Bytes(out) == Bytes(direct));
      CHECK(Bytes(out) != Bytes(x));
    }
  }
}

TEST_CASE("rope family: bad inputs") {
  Tensor x = MakeFloat({2, 3, 8}, DType::kF32, RandomValues(48, 1));
  Tensor pos = MakeInts<int32_t>({2}, DType::kI32, {0, 1});
  CHECK_THROWS_WITH_AS(ops::RopeNeox(x, pos, 7, 1e4f),
                       doctest::Contains("[rope_neox] rotary_dim must be positive and even, got 7"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(ops::RopeInterleaved(x, pos, 10, 1e4f),
                       doctest::Contains("[rope_interleaved] rotary_dim 10 exceeds head_dim 8"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(ops::RopeNeox(x, pos, 8, -1.0f),
                       doctest::Contains("[rope_neox] base must be positive"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(ops::RopeNeox(x, MakeInts<int64_t>({2}, DType::kI64, {0, 1}), 8, 1e4f),
                       doctest::Contains("[rope_neox] positions must be int32, got int64"), TypeError);
  CHECK_THROWS_WITH_AS(ops::RopeNeox(x, MakeInts<int32_t>({3}, DType::kI32, {0, 1, 2}), 8, 1e4f),
                       doctest::Contains("[rope_neox] positions must have shape [2], got [3]"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(ops::RopeNeox(x.Reshape({6, 8}), pos, 8, 1e4f),
                       doctest::Contains("[rope_neox] x must have rank 3"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(ops::RopeNeox(MakeInts<int32_t>({2, 1, 2}, DType::kI32, {1, 2, 3, 4}), pos, 2, 1e4f),
                       doctest::Contains("[rope_neox] x must be float32, float16 or bfloat16"), TypeError);
  CHECK_THROWS_WITH_AS(ops::RopeCosSinCache(pos, 0, 1e4f),
                       doctest::Contains("[rope_cos_sin_cache] rotary_dim must be positive and even"),
                       std::invalid_argument);
  Tensor big = MakeFloat({3, 3, 8}, DType::kF32, RandomValues(72, 1));
  CHECK_THROWS_WITH_AS(ops::RopeNeox(big.Slice(0, 0, 2), pos, 8, 1e4f, big.Slice(0, 1, 3)),
                       doctest::Contains("[rope_neox] out overlaps x (only out = x exactly is allowed)"),
                       std::invalid_argument);
  Tensor cache = ops::RopeCosSinCache(pos, 8, 1e4f);
  CHECK_THROWS_WITH_AS(ops::RopeFromCache(x, cache, MakeInts<int32_t>({2}, DType::kI32, {0, 2})),
                       doctest::Contains("[rope_from_cache] position 2 of token 1 is outside the cos_sin_cache of 2 rows"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(ops::RopeFromCache(x, MakeFloat({2, 8}, DType::kBF16, RandomValues(16, 2)), pos),
                       doctest::Contains("[rope_from_cache] cos_sin_cache must be float32, got bfloat16"),
                       TypeError);
  CHECK_THROWS_WITH_AS(ops::RopeFromCache(x, ops::RopeCosSinCache(pos, 10, 1e4f), pos),
                       doctest::Contains("[rope_from_cache] rotary_dim 10 exceeds head_dim 8"),
                       std::invalid_argument);
}
