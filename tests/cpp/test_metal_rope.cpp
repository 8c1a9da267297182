// Gates of the Metal RoPE kernels (metal/rope.metal, metal/rope_math.h) on the kMETAL
// device versus the CPU oracle: the op-case table (rope_neox / rope_interleaved and
// rope_cos_sin_cache within NMSE 5e-4 and a per-element bar at positions up to 131,072
// with the bases of SmolLM2, Llama 3 and Qwen3, head_dim 64 and 128, partial rotary,
// every float dtype, in place; rope_from_cache bit-exact), and the checks that do not
// fit the table: cos/sin against float64 at long context, rows of a view, bad row
// indices, and the provider's decline past kRopeMaxRotaryDim.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "metal_op_testing.h"
#include "op_cases.h"
#include "rope_args.h"

using namespace metalrt;
using namespace metalrt::testing;

namespace {

// 0 and 1, the end of a 4K context, 32K, and both sides of 2^17 = 131,072 (where a
// float angle is spaced 2^-6 rad apart), plus a few in between.
const std::vector<int32_t> kLongPositions = {0, 1, 7, 4095, 32768, 65535, 100003, 131071, 131072};

struct Geometry {
  const char* name;
  int64_t heads, head_dim, rotary_dim;
  float base;
};
const Geometry kGeometries[] = {
    {"smollm2", 9, 64, 64, 1e5f},            // SmolLM2-135M: 9 heads, head_dim 64, base 1e5
    {"llama3", 8, 128, 128, 5e5f},           // Llama 3 base 500,000
    {"qwen3", 8, 128, 128, 1e6f},            // Qwen3 kv heads, base 1e6
    {"partial128", 3, 128, 64, 1e4f},        // partial rotary: 64 features pass through
    {"partial_odd", 2, 33, 16, 1e4f},        // odd head_dim, pass-through tail of 17
    {"one_pair", 1, 2, 2, 1e4f},             // the smallest head
    {"items127", 1, 254, 254, 1e4f},         // 127, 128, 129 pairs: kRopeThreads - 1, +0, +1
    {"items128", 1, 256, 256, 1e4f},
    {"items129", 1, 258, 258, 1e4f},
};

std::vector<int32_t> Positions(int64_t tokens) {
  std::vector<int32_t> p(static_cast<size_t>(tokens));
  for (size_t t = 0; t < p.size(); ++t) p[t] = kLongPositions[t % kLongPositions.size()] + int32_t(t / 9);
  return p;
}

Tensor PositionsTensor(const std::vector<int32_t>& p) {
  return MakeInts<int32_t>({static_cast<int64_t>(p.size())}, DType::kI32, p);
}

// Our cos/sin are within ~2.5e-7 of the oracle's (both within a few 1e-7 of the true
// value), so a rotated element is within ~1e-6 of max |x|; f16/bf16 outputs may round
// to the neighbouring value (one ulp, two unit roundoffs).
OpCase WithRotationBar(OpCase c, DType dtype) {
  c.bar = {dtype == DType::kF32 ? 0.0 : 2 * UnitRoundoff(dtype), 0.0};
  c.max_rel = 1e-6;
  return c;
}

OpCase RopeCase(DType dtype, bool neox, const Geometry& g, int64_t tokens, bool in_place,
                uint32_t seed) {
  const std::string op = neox ? "rope_neox" : "rope_interleaved";
  const Shape shape = {tokens, g.heads, g.head_dim};
  const Tensor x = MakeFloat(shape, dtype, RandomValuesOf(dtype, Numel(shape), seed, -2.0, 2.0));
  const int64_t rotary_dim = g.rotary_dim;
  const float base = g.base;
  auto rope = [neox, rotary_dim, base](const Tensor& in, const Tensor& pos, const Tensor& out) {
    if (neox) ops::RopeNeox(in, pos, rotary_dim, base, out);
    else ops::RopeInterleaved(in, pos, rotary_dim, base, out);
  };
  OpCase c = SingleOutputCase(CaseName(op, dtype, shape, std::string(g.name) + (in_place ? "/in_place" : "")),
                              op, gpu::KernelName("rope", neox ? "neox" : "interleaved", dtype),
                              {x, PositionsTensor(Positions(tokens))}, {shape, dtype},
                              {}, [rope](const Inputs& in, const Tensor& out) { rope(in[0], in[1], out); });
  if (in_place) {   // out = x: the harness compares x itself, untouched bytes included
    c.outputs.clear();
    c.mutated_inputs = {0};
    c.run = [rope](const Inputs& in, const Outputs&) {
      rope(in[0], in[1], in[0]);
      return Returned{};
    };
  }
  return WithRotationBar(c, dtype);
}

METALRT_OP_CASES(rope_cases) {
  std::vector<OpCase> cases;
  uint32_t seed = 4000;
  for (DType dtype : kFloatDTypes)
    for (bool neox : {true, false}) {
      for (const Geometry& g : kGeometries) cases.push_back(RopeCase(dtype, neox, g, 9, false, seed++));
      // Decode (one token) and a prefill of 33 tokens, in place as the models call it.
      cases.push_back(RopeCase(dtype, neox, kGeometries[0], 1, true, seed++));
      cases.push_back(RopeCase(dtype, neox, kGeometries[2], 33, true, seed++));
    }
  return cases;
}

METALRT_OP_CASES(rope_cos_sin_cache_cases) {
  std::vector<OpCase> cases;
  for (const Geometry& g : kGeometries)
    for (int64_t tokens : {int64_t{1}, int64_t{9}, int64_t{33}}) {
      const int64_t rotary_dim = g.rotary_dim;
      const float base = g.base;
      OpCase c = SingleOutputCase(
          CaseName("rope_cos_sin_cache", DType::kF32, {tokens, rotary_dim}, g.name), "rope_cos_sin_cache",
          "rope_cos_sin_cache_f32", {PositionsTensor(Positions(tokens))}, {{tokens, rotary_dim}, DType::kF32},
          {}, [rotary_dim, base](const Inputs& in, const Tensor& out) {
            ops::RopeCosSinCache(in[0], rotary_dim, base, out);
          });
      c.bar = {0.0, 4e-7};   // both within a few 1e-7 of the true cos/sin
      cases.push_back(c);
    }
  return cases;
}

METALRT_OP_CASES(rope_from_cache_cases) {
  std::vector<OpCase> cases;
  uint32_t seed = 4100;
  const int64_t cache_rows = 40;
  const std::vector<int32_t> rows = {39, 0, 17, 17, 1, 38, 2};   // repeats, both ends
  for (DType dtype : kFloatDTypes)
    for (bool neox : {true, false})
      for (const Geometry& g : kGeometries) {
        const Shape shape = {static_cast<int64_t>(rows.size()), g.heads, g.head_dim};
        const Tensor x = MakeFloat(shape, dtype, RandomValuesOf(dtype, Numel(shape), seed++, -2.0, 2.0));
        // Any f32 table is a valid cache; random entries make every element count.
        const Tensor cache = MakeFloat({cache_rows, g.rotary_dim}, DType::kF32,
                                       RandomValues(cache_rows * g.rotary_dim, seed++));
        const std::string variant = neox ? "neox" : "interleaved";
        cases.push_back(BitExact(SingleOutputCase(
            CaseName("rope_from_cache", dtype, shape, std::string(g.name) + "/" + variant), "rope_from_cache",
            gpu::KernelName("rope_from_cache", variant, dtype), {x, cache, PositionsTensor(rows)},
            {shape, dtype}, {}, [neox](const Inputs& in, const Tensor& out) {
              ops::RopeFromCache(in[0], in[1], in[2], neox, out);
            })));
      }
  // In place, as the models apply Llama 3's scaled table.
  const Shape shape = {7, 8, 128};
  OpCase c = BitExact(SingleOutputCase(
      CaseName("rope_from_cache", DType::kBF16, shape, "in_place"), "rope_from_cache",
      "rope_from_cache_neox_bf16",
      {MakeFloat(shape, DType::kBF16, RandomValuesOf(DType::kBF16, Numel(shape), seed++)),
       MakeFloat({cache_rows, 128}, DType::kF32, RandomValues(cache_rows * 128, seed++)), PositionsTensor(rows)},
      {shape, DType::kBF16}, {}, nullptr));
  c.outputs.clear();
  c.mutated_inputs = {0};
  c.run = [](const Inputs& in, const Outputs&) {
    ops::RopeFromCache(in[0], in[1], in[2], true, in[0]);
    return Returned{};
  };
  cases.push_back(c);
  return cases;
}

}  // namespace

TEST_CASE("metal rope_cos_sin_cache: cos and sin within 4e-7 of float64 at long context") {
  // Positions up to 2^24 keep the reduced angle to about half a float ulp; beyond that
  // the error grows gently (rope_math.h), still far below a float angle's.
  const std::vector<int32_t> positions = {0, 1, 4095, 32768, 131071, 131072, 1000003, 1 << 24};
  for (const Geometry& g : kGeometries) {
    CAPTURE(std::string(g.name));
    const Tensor out = PoisonedMetal({int64_t(positions.size()), g.rotary_dim}, DType::kF32);
    ops::RopeCosSinCache(ToMetal(PositionsTensor(positions)), g.rotary_dim, g.base, out);
    const std::vector<double> got = ReadMetal(out);
    const int64_t half = g.rotary_dim / 2;
    double worst = 0, worst_at_131072 = 0, naive_at_131072 = 0;
    for (size_t t = 0; t < positions.size(); ++t)
      for (int64_t i = 0; i < half; ++i) {
        const double inv_freq = std::pow(double(g.base), -2.0 * double(i) / double(g.rotary_dim));
        const double theta = positions[t] * inv_freq;
        const double* row = got.data() + t * g.rotary_dim;
        const double err = std::max(std::fabs(row[i] - std::cos(theta)), std::fabs(row[half + i] - std::sin(theta)));
        worst = std::max(worst, err);
        if (positions[t] == 131072) {
          worst_at_131072 = std::max(worst_at_131072, err);
          // What a float angle would give: float(position) * float(inv_freq), cos in double.
          const float naive = float(positions[t]) * float(inv_freq);
          naive_at_131072 = std::max(naive_at_131072, std::fabs(std::cos(double(naive)) - std::cos(theta)));
        }
      }
    CHECK(worst <= 4e-7);
    // The position discriminates: a float angle is off by three orders of magnitude more.
    if (half > 1) CHECK(naive_at_131072 > 2e-4);
    MESSAGE(g.name << ": worst |cos/sin - float64| " << worst << ", at 131072 " << worst_at_131072
                   << " (a float angle: " << naive_at_131072 << ")");
  }
}

TEST_CASE("metal rope_cos_sin_cache: the error stays small up to position 2^31 - 1") {
  const std::vector<int32_t> positions = {(1 << 24) + 1, 123456789, 2147483647, -131072};
  const int64_t rotary_dim = 128;
  const Tensor out = PoisonedMetal({int64_t(positions.size()), rotary_dim}, DType::kF32);
  ops::RopeCosSinCache(ToMetal(PositionsTensor(positions)), rotary_dim, 1e6f, out);
  const std::vector<double> got = ReadMetal(out);
  const Tensor ref = ops::RopeCosSinCache(PositionsTensor(positions), rotary_dim, 1e6f);
  // The double oracle's own angle is exact to ~2e-7 rad at 2^31; ours to ~1e-6 turn.
  CheckClose(got, ReadFloat(ref), {0.0, 2e-5}, "rope_cos_sin_cache at huge positions");
}

TEST_CASE("metal rope_neox: rows [1, 3) of a 4-row allocation, in place, change only those rows") {
  const Shape shape = {4, 3, 64};
  const Tensor x_cpu = MakeFloat(shape, DType::kF32, RandomValues(Numel(shape), 4200));
  const Tensor pos = PositionsTensor({4095, 131072});
  const Tensor x = ToMetal(x_cpu);
  ops::RopeNeox(x.Slice(0, 1, 3), ToMetal(pos), 64, 1e5f, x.Slice(0, 1, 3));
  const std::vector<double> got = ReadMetal(x);
  const std::vector<double> before = ReadFloat(x_cpu);
  const std::vector<double> ref = ReadFloat(ops::RopeNeox(x_cpu.Slice(0, 1, 3), pos, 64, 1e5f));
  const size_t row = 3 * 64;
  CHECK(std::equal(got.begin(), got.begin() + row, before.begin()));
  CHECK(std::equal(got.begin() + 3 * row, got.end(), before.begin() + 3 * row));
  CheckClose({got.begin() + row, got.begin() + 3 * row}, ref, {0.0, 4e-6}, "rows [1, 3)");
  CHECK(Nmse({got.begin() + row, got.begin() + 3 * row}, {before.begin() + row, before.begin() + 3 * row}) > 1e-3);
}

TEST_CASE("metal rope_from_cache: a row outside the cache throws and leaves out untouched") {
  const Tensor x = ToMetal(MakeFloat({2, 3, 8}, DType::kF32, RandomValues(48, 4300)));
  const Tensor cache = ToMetal(MakeFloat({5, 8}, DType::kF32, RandomValues(40, 4301)));
  for (int32_t bad : {5, -1}) {
    const Tensor out = PoisonedMetal({2, 3, 8}, DType::kF32);
    CheckThrows<std::invalid_argument>(
        [&] { ops::RopeFromCache(x, cache, ToMetal(PositionsTensor({0, bad})), true, out); },
        "[rope_from_cache] position " + std::to_string(bad) + " of token 1 is outside the cos_sin_cache of 5 rows");
    for (double v : ReadMetal(out)) CHECK(std::isnan(v));
  }
}

TEST_CASE("metal rope_neox: rotary_dim from kRopeMaxRotaryDim is declined to the reference tier") {
  // At 1024 the frequency table is 4096 bytes, one more than setBytes takes.
  for (const int64_t d : {kRopeMaxRotaryDim, kRopeMaxRotaryDim + 2}) {
    CAPTURE(d);
    const Tensor x = MakeFloat({2, 1, d}, DType::kF32, RandomValues(2 * d, 4400));
    const Tensor pos = PositionsTensor({3, 131072});
    ResetProviderStats();
    const std::vector<double> got = ReadMetal(ops::RopeNeox(ToMetal(x), ToMetal(pos), d, 1e4f));
    const ProviderStats stats = GetProviderStats("rope_neox", DeviceType::kMETAL);
    CHECK(stats.declines == 1);
    CHECK(stats.reference_hits == 1);
    CHECK(got == ReadFloat(ops::RopeNeox(x, pos, d, 1e4f)));
  }
}
