#include <doctest/doctest.h>

#include "metalrt/errors.h"
#include "metalrt/ops.h"
#include "op_testing.h"

using namespace metalrt;
using namespace metalrt::testing;

namespace {

// float64 Qwen3 recipe on x [T, heads, head_dim]: y = x / sqrt(mean(x^2) + eps) * w per
// head, then NeoX rotation of pairs (i, i + rotary_dim/2) by position * base^(-2i/rotary_dim).
std::vector<double> Reference(const std::vector<double>& x, const std::vector<double>& w,
                              const std::vector<int32_t>& pos, int64_t heads, int64_t head_dim,
                              double eps, int64_t rotary_dim, double base) {
  std::vector<double> y(x.size());
  const int64_t half = rotary_dim / 2;
  for (size_t t = 0; t < pos.size(); ++t)
    for (int64_t h = 0; h < heads; ++h) {
      const size_t row = (t * heads + h) * head_dim;
      double ss = 0;
      for (int64_t d = 0; d < head_dim; ++d) ss += x[row + d] * x[row + d];
      const double r = 1.0 / std::sqrt(ss / head_dim + eps);
      for (int64_t d = 0; d < head_dim; ++d) y[row + d] = x[row + d] * r * w[d];
      for (int64_t i = 0; i < half; ++i) {
        const double theta = pos[t] * std::pow(base, -2.0 * static_cast<double>(i) / rotary_dim);
        const double a = y[row + i], b = y[row + i + half];
        y[row + i] = a * std::cos(theta) - b * std::sin(theta);
        y[row + i + half] = b * std::cos(theta) + a * std::sin(theta);
      }
    }
  return y;
}

}  // namespace

TEST_CASE("qk_norm_rope: Qwen3 geometry vs float64, and equal to the rms_norm + rope_neox composite") {
  const std::vector<int32_t> pos = {0, 5, 31, 32, 33, 4097, 131072};
  const int64_t tokens = static_cast<int64_t>(pos.size());
  struct Geometry { int64_t heads, kv_heads, head_dim, rotary_dim; };
  for (const Geometry& g : {Geometry{16, 8, 128, 128}, Geometry{3, 1, 64, 32}}) {
    for (DType dtype : {DType::kF32, DType::kBF16}) {
      CAPTURE(g.head_dim);
      CAPTURE(DTypeName(dtype));
      const double eps = 1e-6, base = 1e6;
      Tensor q = MakeFloat({tokens, g.heads, g.head_dim}, dtype, RandomValues(tokens * g.heads * g.head_dim, 51, -3, 3));
      Tensor k = MakeFloat({tokens, g.kv_heads, g.head_dim}, dtype, RandomValues(tokens * g.kv_heads * g.head_dim, 52, -3, 3));
      Tensor qw = MakeFloat({g.head_dim}, dtype, RandomValues(g.head_dim, 53, 0.5, 1.5));
      Tensor kw = MakeFloat({g.head_dim}, dtype, RandomValues(g.head_dim, 54, 0.5, 1.5));
      Tensor positions = MakeInts<int32_t>({tokens}, DType::kI32, pos);
      auto [q_out, k_out] = ops::QkNormRope(q, k, qw, kw, positions, static_cast<float>(eps),
                                            g.rotary_dim, static_cast<float>(base));
      // The intermediate normalised value is rounded to the dtype (the composite), so the
      // bound is two roundings of the dtype on values of magnitude ~ |w| <= 1.5 plus f32 work.
      const double u = UnitRoundoff(dtype);
      const double bound = 2 * u * 1.5 * 2 + 1e-5;
      for (const auto& [in, w, out, heads] : {std::tuple{&q, &qw, &q_out, g.heads}, std::tuple{&k, &kw, &k_out, g.kv_heads}}) {
        const std::vector<double> ref =
            Reference(ReadFloat(*in), ReadFloat(*w), pos, heads, g.head_dim, eps, g.rotary_dim, base);
        const std::vector<double> got = ReadFloat(*out);
        double worst = 0;
        for (size_t i = 0; i < ref.size(); ++i) worst = std::max(worst, std::abs(got[i] - ref[i]));
        CHECK(worst <= bound);
        CHECK(Nmse(got, ref) <= (dtype == DType::kF32 ? 1e-11 : 16 * u * u));
        // The CPU provider is defined as the composite of the two ops, bit for bit.
        Tensor composite = ops::RopeNeox(ops::RmsNorm(*in, *w, static_cast<float>(eps)), positions,
                                         g.rotary_dim, static_cast<float>(base));
        CHECK(Bytes(*out) == Bytes(composite));
      }
    }
  }
}

TEST_CASE("qk_norm_rope: bad inputs") {
  Tensor q = MakeFloat({2, 4, 8}, DType::kF32, RandomValues(64, 1));
  Tensor k = MakeFloat({2, 2, 8}, DType::kF32, RandomValues(32, 2));
  Tensor w = MakeFloat({8}, DType::kF32, RandomValues(8, 3));
  Tensor pos = MakeInts<int32_t>({2}, DType::kI32, {0, 1});
  CHECK_THROWS_WITH_AS(ops::QkNormRope(q, MakeFloat({2, 2, 4}, DType::kF32, RandomValues(16, 2)), w, w, pos, 1e-6f, 8, 1e6f),
                       doctest::Contains("[qk_norm_rope] k must be [2, kv_heads, 8]"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(ops::QkNormRope(q, k, MakeFloat({4}, DType::kF32, RandomValues(4, 3)), w, pos, 1e-6f, 8, 1e6f),
                       doctest::Contains("[qk_norm_rope] q_weight must have shape [8], got [4]"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(ops::QkNormRope(q, k, w, MakeFloat({8}, DType::kBF16, RandomValues(8, 3)), pos, 1e-6f, 8, 1e6f),
                       doctest::Contains("[qk_norm_rope] k_weight must have the dtype of q"), TypeError);
  CHECK_THROWS_WITH_AS(ops::QkNormRope(q, k, w, w, MakeInts<int64_t>({2}, DType::kI64, {0, 1}), 1e-6f, 8, 1e6f),
                       doctest::Contains("[qk_norm_rope] positions must be int32"), TypeError);
  CHECK_THROWS_WITH_AS(ops::QkNormRope(q, k, w, w, pos, 1e-6f, 10, 1e6f),
                       doctest::Contains("[qk_norm_rope] rotary_dim must be positive, even and <= head_dim 8, got 10"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(ops::QkNormRope(q.Reshape({2, 32}), k, w, w, pos, 1e-6f, 8, 1e6f),
                       doctest::Contains("[qk_norm_rope] q must have rank 3"), std::invalid_argument);
}
