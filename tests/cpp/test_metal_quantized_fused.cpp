// Gates of the fused quantized GEMVs (metal/quantized.metal's quantized_matmul_bt_add_gemv
// and quantized_matmul_bt_swiglu_gemv): in the op-case table against the CPU oracle (the
// composition of the CPU quantized_matmul_bt and add / silu_and_mul) at the default
// model's shapes (o and down projections 576x576 and 576x1536, gate|up 3072x576, Q4_1
// and Q8_0) and boundary shapes (N = 1, 5, 13: partial SIMD-groups; m = 1..8, and m = 9,
// where the provider composes the GEMM with the second op); bit-exact against the
// unfused Metal composition they replace; the in-place residual form. The concatenated
// GEMV (quantized_matmul_bt_concat_gemv) at the model's Q/K/V shapes (K = 576, Nq = 576,
// Nk = Nv = 192), boundary shapes and every format, bit-exact with the three Metal
// quantized_matmul_bt it replaces.
#include <doctest/doctest.h>

#include "metal_op_testing.h"
#include "metalrt/ops.h"
#include "op_cases.h"
#include "quantized_args.h"
#include "quantized_testing.h"
#include "sim_testing.h"

using namespace metalrt;
using namespace metalrt::testing;

namespace {

std::string FormatToken(const WeightSpec& s) {
  return IsAffine(s) ? std::string("affine_") + gpu::KernelDTypeSuffix(s.scales) : QuantFormatName(s.format);
}

// Both sides accumulate in f32 in different orders (the quantized_matmul_bt bars).
OpCase WithMatmulBars(OpCase c, DType dtype) {
  c.nmse = dtype == DType::kF32 ? 1e-6 : 5e-4;
  c.max_rel = dtype == DType::kF32 ? 1e-5 : 4 * UnitRoundoff(dtype);
  return c;
}

// The GEMV variant at K: the wide chunk from K = 512 on (QuantGemvChunk; the weights
// the tests make are aligned for it).
std::string GemvVariant(int64_t k) { return k >= 512 ? "gemv16_" : "gemv_"; }

// The kernels a call dispatches: the fused GEMV, or (m > 8) the GEMM and the second op.
std::vector<std::string> FusedKernels(const char* op, const char* second, const WeightSpec& s, int64_t m, int64_t k,
                                      DType dtype) {
  if (m <= 8) return {gpu::KernelName(op, GemvVariant(k) + FormatToken(s), dtype)};
  return {gpu::KernelName("quantized_matmul_bt", "gemm_" + FormatToken(s), dtype), gpu::KernelName(second, "", dtype)};
}

OpCase AddCase(const WeightSpec& s, int64_t m, int64_t k, int64_t n, DType dtype, uint32_t seed) {
  std::vector<Tensor> inputs{MakeFloat({m, k}, dtype, RandomValuesOf(dtype, m * k, seed)),
                             MakeFloat({m, n}, dtype, RandomValuesOf(dtype, m * n, seed + 2))};
  for (const Tensor& t : RandomWeight(s, n, k, seed + 1)) inputs.push_back(t);
  OpCase c = SingleOutputCase(CaseName("quantized_matmul_bt_add", dtype, {m, k, n}, SpecName(s)),
                              "quantized_matmul_bt_add", "", inputs, {{m, n}, dtype}, {0.0, 0.0},
                              [s, n, k](const Inputs& in, const Tensor& out) {
                                ops::QuantizedMatmulBTAdd(in[0], WeightOf(s, n, k, in, 2), in[1], out);
                              });
  c.kernels = FusedKernels("quantized_matmul_bt_add", "add", s, m, k, dtype);
  return WithMatmulBars(c, dtype);
}

OpCase SwigluCase(const WeightSpec& s, int64_t m, int64_t k, int64_t inner, DType dtype, uint32_t seed) {
  std::vector<Tensor> inputs{MakeFloat({m, k}, dtype, RandomValuesOf(dtype, m * k, seed))};
  for (const Tensor& t : RandomWeight(s, 2 * inner, k, seed + 1)) inputs.push_back(t);
  OpCase c = SingleOutputCase(CaseName("quantized_matmul_bt_swiglu", dtype, {m, k, inner}, SpecName(s)),
                              "quantized_matmul_bt_swiglu", "", inputs, {{m, inner}, dtype}, {0.0, 0.0},
                              [s, inner, k](const Inputs& in, const Tensor& out) {
                                ops::QuantizedMatmulBTSwiglu(in[0], WeightOf(s, 2 * inner, k, in, 1), out);
                              });
  c.kernels = FusedKernels("quantized_matmul_bt_swiglu", "silu_and_mul", s, m, k, dtype);
  return WithMatmulBars(c, dtype);
}

// x [m, k] and the tensors of one weight per n in `ns`, each of format s.
std::vector<Tensor> ConcatInputs(const WeightSpec& s, int64_t m, int64_t k, const std::vector<int64_t>& ns,
                                 DType dtype, uint32_t seed) {
  std::vector<Tensor> inputs{MakeFloat({m, k}, dtype, RandomValuesOf(dtype, m * k, seed))};
  for (int64_t n : ns)
    for (const Tensor& t : RandomWeight(s, n, k, ++seed)) inputs.push_back(t);
  return inputs;
}

std::vector<QuantizedTensor> ConcatWeights(const WeightSpec& s, int64_t k, const std::vector<int64_t>& ns,
                                           const std::vector<Tensor>& inputs) {
  std::vector<QuantizedTensor> weights;
  const size_t per = IsAffine(s) ? 3 : 1;
  for (size_t j = 0; j < ns.size(); ++j) weights.push_back(WeightOf(s, ns[j], k, inputs, 1 + j * per));
  return weights;
}

int64_t Total(const std::vector<int64_t>& ns) {
  int64_t total = 0;
  for (int64_t n : ns) total += n;
  return total;
}

OpCase ConcatCase(const WeightSpec& s, int64_t m, int64_t k, std::vector<int64_t> ns, DType dtype, uint32_t seed) {
  OpCase c = SingleOutputCase(CaseName("quantized_matmul_bt_concat", dtype, {m, k, Total(ns)}, SpecName(s)),
                              "quantized_matmul_bt_concat",
                              gpu::KernelName("quantized_matmul_bt_concat", GemvVariant(k) + FormatToken(s), dtype),
                              ConcatInputs(s, m, k, ns, dtype, seed), {{m, Total(ns)}, dtype}, {0.0, 0.0},
                              [s, k, ns](const Inputs& in, const Tensor& out) {
                                ops::QuantizedMatmulBTConcat(in[0], ConcatWeights(s, k, ns, in), out);
                              });
  return WithMatmulBars(c, dtype);
}

// Every GGUF format and two MLX affine layouts.
std::vector<WeightSpec> AllSpecs() {
  return GgufSpecsAnd({{QuantFormat::kAffine, 4, 64, DType::kBF16}, {QuantFormat::kAffine, 3, 32, DType::kF16}});
}

}  // namespace

METALRT_OP_CASES(quantized_concat_cases) {
  std::vector<OpCase> cases;
  uint32_t seed = 19500;
  auto next = [&seed] { return seed += 11; };
  // The default model's Q/K/V (SmolLM2-135M Q4_1): K = 576, Nq = 576, Nk = Nv = 192.
  for (DType dtype : kFloatDTypes) cases.push_back(ConcatCase({QuantFormat::kQ4_1}, 1, 576, {576, 192, 192}, dtype, next()));
  // K split (K = 1536): ragged weights, a batch.
  cases.push_back(ConcatCase({QuantFormat::kQ8_0}, 3, 1536, {7, 4, 9}, DType::kBF16, next()));
  // Boundaries in every format: N's not a multiple of the 4 rows per SIMD-group (a
  // SIMD-group never spans two weights), two weights, m = 1..8 across the cases.
  int64_t m = 1;
  for (const WeightSpec& s : AllSpecs()) {
    const int64_t k = IsKQuant(s.format) ? 256 : 128;
    cases.push_back(ConcatCase(s, m, k, {5, 3, 13}, DType::kF32, next()));
    cases.push_back(ConcatCase(s, 9 - m, k, {1, 6}, DType::kF16, next()));
    // The wide chunk (gemv16, K >= 512) in every format, and K = 1536 split in two.
    cases.push_back(ConcatCase(s, m, 512, {5, 3, 13}, DType::kBF16, next()));
    cases.push_back(ConcatCase(s, 1, 1536, {3, 4}, DType::kF32, next()));
    m = m % 8 + 1;
  }
  return cases;
}

METALRT_OP_CASES(quantized_fused_cases) {
  std::vector<OpCase> cases;
  uint32_t seed = 19000;
  auto next = [&seed] { return seed += 7; };
  const WeightSpec q4_1{QuantFormat::kQ4_1}, q8_0{QuantFormat::kQ8_0};
  // The default model: o (576 <- 576), down (576 <- 1536), gate|up (2 x 1536 <- 576).
  for (DType dtype : kFloatDTypes) {
    cases.push_back(AddCase(q4_1, 1, 576, 576, dtype, next()));
    cases.push_back(AddCase(q4_1, 1, 1536, 576, dtype, next()));
    cases.push_back(SwigluCase(q4_1, 1, 576, 1536, dtype, next()));
  }
  // Boundaries: partial SIMD-groups (N or I = 1, 5, 13), every GEMV m to 8, the
  // composition at m = 9, another format and an affine weight.
  for (int64_t n : {1, 5, 13}) {
    cases.push_back(AddCase(q8_0, 3, 64, n, DType::kF32, next()));
    cases.push_back(SwigluCase(q8_0, 2, 64, n, DType::kF32, next()));
  }
  for (int64_t m : {2, 8, 9}) {
    cases.push_back(AddCase(q4_1, m, 576, 40, DType::kF16, next()));
    cases.push_back(SwigluCase(q4_1, m, 576, 24, DType::kBF16, next()));
  }
  const WeightSpec affine{QuantFormat::kAffine, 4, 64, DType::kBF16};
  cases.push_back(AddCase(affine, 1, 576, 9, DType::kF32, next()));
  cases.push_back(SwigluCase(affine, 1, 576, 9, DType::kF32, next()));
  // K = 1536 splits K over the SIMD-groups (QuantGemvSplits) at every m and ragged N.
  cases.push_back(AddCase(q8_0, 8, 1536, 13, DType::kF32, next()));
  cases.push_back(SwigluCase(q4_1, 7, 1536, 40, DType::kF16, next()));
  cases.push_back(SwigluCase(affine, 1, 1536, 5, DType::kBF16, next()));
  return cases;
}

TEST_CASE("metal quantized fused GEMVs: bit-exact with the unfused Metal composition, residual in place") {
  // The epilogues round the product to the activation dtype before the add / SwiGLU, as
  // the two unfused dispatches do, so the results match byte for byte in every dtype.
  const WeightSpec s{QuantFormat::kQ4_1};
  for (DType dtype : kFloatDTypes) {
    CAPTURE(std::string(DTypeName(dtype)));
    const Tensor x = ToMetal(MakeFloat({1, 576}, dtype, RandomValuesOf(dtype, 576, 5)));
    const std::vector<Tensor> wt = RandomWeight(s, 3072, 576, 6);
    const QuantizedTensor w = MakeQuantizedTensor(s.format, 3072, 576, ToMetal(wt[0]));
    const Tensor residual_host = MakeFloat({1, 3072}, dtype, RandomValuesOf(dtype, 3072, 7));

    const Tensor unfused_add = ops::Add(ops::QuantizedMatmulBT(x, w), ToMetal(residual_host));
    Tensor h = ToMetal(residual_host);   // in place: out is the residual
    ops::QuantizedMatmulBTAdd(x, w, h, h);
    CHECK(ReadMetal(h) == ReadMetal(unfused_add));
    CHECK(ReadMetal(h) != ReadFloat(residual_host));

    const Tensor unfused_swiglu = ops::SiluAndMul(ops::QuantizedMatmulBT(x, w));
    const Tensor fused = PoisonedMetal({1, 1536}, dtype);
    ops::QuantizedMatmulBTSwiglu(x, w, fused);
    CHECK(ReadMetal(fused) == ReadMetal(unfused_swiglu));
  }
}

// The threadgroups of `kernel`'s last dispatch along x (the profiler's grid).
uint32_t GridX(const std::vector<ProfileRow>& rows, const std::string& kernel) {
  for (const ProfileRow& row : rows)
    if (row.name == kernel) return row.last_grid[0];
  return 0;
}

// The fused, concatenated and plain GEMVs at K = k over n rows, in every fiber order:
// the fused epilogues match the plain GEMV then add / silu_and_mul byte for byte, every
// order gives the same bytes, and the profiler shows kernel variant `gemv` ("gemv_" or
// "gemv16_") on a grid of threadgroups per 8 rows (per 4 with K split).
void CheckFusedGemvs(int64_t k, int64_t n, const char* gemv, int32_t splits) {
  const int64_t inner = 40;
  REQUIRE(QuantGemvSplits(n / kQuantGemvRows, k) == splits);
  const uint32_t rows_per_group = static_cast<uint32_t>(kQuantGemvRows * kQuantGemvSimdgroups / splits);
  const std::vector<int64_t> ns{7, 4, 9};
  for (const WeightSpec& s : {WeightSpec{QuantFormat::kQ4_1}, WeightSpec{QuantFormat::kAffine, 4, 64, DType::kBF16}}) {
    CAPTURE(SpecName(s));
    const DType dtype = DType::kBF16;
    const std::string token = FormatToken(s);
    const Tensor x = ToMetal(MakeFloat({2, k}, dtype, RandomValuesOf(dtype, 2 * k, 41)));
    const std::vector<Tensor> wt = RandomWeight(s, n, k, 42);
    std::vector<Tensor> wt_device;
    for (const Tensor& t : wt) wt_device.push_back(ToMetal(t));
    const QuantizedTensor w = WeightOf(s, n, k, wt_device, 0);
    const QuantizedTensor gate_up = WeightOf(s, 2 * inner, k, [&] {
      std::vector<Tensor> g;
      for (const Tensor& t : RandomWeight(s, 2 * inner, k, 43)) g.push_back(ToMetal(t));
      return g;
    }(), 0);
    const Tensor residual = ToMetal(MakeFloat({2, n}, dtype, RandomValuesOf(dtype, 2 * n, 44)));
    std::vector<Tensor> concat_inputs = ConcatInputs(s, 2, k, ns, dtype, 45);
    for (Tensor& t : concat_inputs) t = ToMetal(t);
    const std::vector<QuantizedTensor> parts = ConcatWeights(s, k, ns, concat_inputs);
    std::vector<uint8_t> first_add, first_swiglu;
    for (const std::string& order : SimOrders()) {
      CAPTURE(order);
      const ScopedFiberOrder scoped(order);
      Tensor product, unfused_add, fused_add = PoisonedMetal({2, n}, dtype);
      const auto plain = ProfiledRows([&] { product = ops::QuantizedMatmulBT(x, w); });
      CHECK(GridX(plain, gpu::KernelName("quantized_matmul_bt", std::string(gemv) + token, dtype)) == n / rows_per_group);
      unfused_add = ops::Add(product, residual);
      const auto add = ProfiledRows([&] { ops::QuantizedMatmulBTAdd(x, w, residual, fused_add); });
      CHECK(GridX(add, gpu::KernelName("quantized_matmul_bt_add", std::string(gemv) + token, dtype)) == n / rows_per_group);
      CHECK(ReadMetal(fused_add) == ReadMetal(unfused_add));
      CHECK(Nmse(ReadMetal(product), ReadFloat(ops::QuantizedMatmulBT(CopyToDevice(x, DeviceType::kCPU),
                                                                       WeightOf(s, n, k, wt, 0)))) <= 5e-4);

      const Tensor fused_swiglu = PoisonedMetal({2, inner}, dtype);
      const auto swiglu = ProfiledRows([&] { ops::QuantizedMatmulBTSwiglu(x, gate_up, fused_swiglu); });
      CHECK(GridX(swiglu, gpu::KernelName("quantized_matmul_bt_swiglu", std::string(gemv) + token, dtype)) ==
            (inner + rows_per_group - 1) / rows_per_group);
      CHECK(ReadMetal(fused_swiglu) == ReadMetal(ops::SiluAndMul(ops::QuantizedMatmulBT(x, gate_up))));

      // The concatenated GEMV: blocks of 4 rows per weight (2 + 1 + 3).
      const Tensor concat = PoisonedMetal({2, Total(ns)}, dtype);
      const auto cat = ProfiledRows([&] { ops::QuantizedMatmulBTConcat(concat_inputs[0], parts, concat); });
      CHECK(GridX(cat, gpu::KernelName("quantized_matmul_bt_concat", std::string(gemv) + token, dtype)) ==
            (6u * splits + 1) / 2);
      std::vector<double> expected(static_cast<size_t>(2 * Total(ns)));
      int64_t column0 = 0;
      for (const QuantizedTensor& part : parts) {
        const std::vector<double> got = ReadMetal(ops::QuantizedMatmulBT(concat_inputs[0], part));
        for (int64_t i = 0; i < 2; ++i)
          for (int64_t r = 0; r < part.rows; ++r) expected[i * Total(ns) + column0 + r] = got[i * part.rows + r];
        column0 += part.rows;
      }
      CHECK(ReadMetal(concat) == expected);

      const std::vector<uint8_t> add_bytes = Bytes(CopyToDevice(fused_add, DeviceType::kCPU));
      const std::vector<uint8_t> swiglu_bytes = Bytes(CopyToDevice(fused_swiglu, DeviceType::kCPU));
      if (first_add.empty()) {
        first_add = add_bytes;
        first_swiglu = swiglu_bytes;
      } else {
        CHECK(add_bytes == first_add);
        CHECK(swiglu_bytes == first_swiglu);
      }
    }
  }
}

TEST_CASE("metal quantized GEMVs with K split (down_proj's K = 1536): fused bit-exact with unfused, every fiber order") {
  REQUIRE(QuantGemvSplits(576 / kQuantGemvRows, 576) == 1);
  CheckFusedGemvs(1536, 576, "gemv16_", 2);   // 768 per part: a wide pass, an 8-value tail
}

TEST_CASE("metal quantized GEMVs with the wide chunk (gemv16): fused bit-exact with unfused, every fiber order") {
  CheckFusedGemvs(576, 576, "gemv16_", 1);    // a wide pass, an 8-value tail for 8 lanes
  CheckFusedGemvs(2048, 576, "gemv16_", 2);   // wide passes only, K split
  CheckFusedGemvs(256, 576, "gemv_", 1);      // below one wide pass
}

TEST_CASE("quantized fused GEMVs: bad arguments are errors naming the op") {
  const WeightSpec s{QuantFormat::kQ8_0};
  const QuantizedTensor w = MakeQuantizedTensor(s.format, 5, 64, RandomWeight(s, 5, 64, 1)[0]);
  const Tensor x = MakeFloat({2, 64}, DType::kF32, RandomValues(128, 2));
  CHECK_THROWS_WITH_AS(ops::QuantizedMatmulBTAdd(x, w, MakeFloat({2, 4}, DType::kF32, RandomValues(8, 3))),
                       doctest::Contains("[quantized_matmul_bt_add] residual"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(ops::QuantizedMatmulBTSwiglu(x, w), doctest::Contains("even number of rows"),
                       std::invalid_argument);
}

TEST_CASE("quantized_matmul_bt_add on the CPU: the residual in place equals the composition") {
  const WeightSpec s{QuantFormat::kQ4_1};
  const QuantizedTensor w = MakeQuantizedTensor(s.format, 40, 576, RandomWeight(s, 40, 576, 8)[0]);
  const Tensor x = MakeFloat({2, 576}, DType::kF32, RandomValues(2 * 576, 9));
  const Tensor residual = MakeFloat({2, 40}, DType::kF32, RandomValues(80, 10));
  const Tensor expected = ops::Add(ops::QuantizedMatmulBT(x, w), residual);
  Tensor h = MakeFloat({2, 40}, DType::kF32, ReadFloat(residual));
  ops::QuantizedMatmulBTAdd(x, w, h, h);
  CHECK(ReadFloat(h) == ReadFloat(expected));
  CHECK(ReadFloat(h) != ReadFloat(residual));
}

TEST_CASE("metal quantized_matmul_bt_concat: bit-exact with one quantized_matmul_bt per weight, one dispatch") {
  // The concatenated GEMV runs quantized_matmul_bt_gemv's body on each weight's rows, so
  // every column slice matches that weight's own GEMV byte for byte; at m = 9 the Metal
  // provider declines and the composition (three GEMMs) serves it.
  const std::vector<int64_t> ns{7, 4, 9};
  for (const WeightSpec& s : AllSpecs()) {
    for (int64_t m : {1, 3, 8, 9}) {
      CAPTURE(SpecName(s));
      CAPTURE(m);
      const int64_t k = IsKQuant(s.format) ? 256 : 64;
      std::vector<Tensor> inputs = ConcatInputs(s, m, k, ns, DType::kF16, 31 + static_cast<uint32_t>(m));
      for (Tensor& t : inputs) t = ToMetal(t);
      const std::vector<QuantizedTensor> weights = ConcatWeights(s, k, ns, inputs);
      std::vector<double> expected(static_cast<size_t>(m * Total(ns)));
      int64_t column0 = 0;
      for (const QuantizedTensor& w : weights) {
        const std::vector<double> part = ReadMetal(ops::QuantizedMatmulBT(inputs[0], w));
        for (int64_t i = 0; i < m; ++i)
          for (int64_t r = 0; r < w.rows; ++r) expected[i * Total(ns) + column0 + r] = part[i * w.rows + r];
        column0 += w.rows;
      }
      const Tensor out = PoisonedMetal({m, Total(ns)}, DType::kF16);
      const std::string kernel = gpu::KernelName("quantized_matmul_bt_concat", "gemv_" + FormatToken(s), DType::kF16);
      const auto rows = ProfiledRows([&] { ops::QuantizedMatmulBTConcat(inputs[0], weights, out); });
      CHECK(Dispatches(rows, kernel) == (m <= 8 ? 1u : 0u));
      CHECK(ReadMetal(out) == expected);
    }
  }
}

TEST_CASE("quantized_matmul_bt_concat: bad arguments are errors naming the op") {
  const WeightSpec q8{QuantFormat::kQ8_0}, q4{QuantFormat::kQ4_1};
  const QuantizedTensor a = MakeQuantizedTensor(q8.format, 5, 64, RandomWeight(q8, 5, 64, 1)[0]);
  const QuantizedTensor b = MakeQuantizedTensor(q4.format, 5, 64, RandomWeight(q4, 5, 64, 2)[0]);
  const QuantizedTensor wide = MakeQuantizedTensor(q8.format, 5, 128, RandomWeight(q8, 5, 128, 3)[0]);
  const Tensor x = MakeFloat({2, 64}, DType::kF32, RandomValues(128, 4));
  CHECK_THROWS_WITH_AS(ops::QuantizedMatmulBTConcat(x, {a}), doctest::Contains("expected 2 or 3 weights"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(ops::QuantizedMatmulBTConcat(x, {a, b}), doctest::Contains("share the first's format"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(ops::QuantizedMatmulBTConcat(x, {a, wide}),
                       doctest::Contains("[quantized_matmul_bt_concat]"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(ops::QuantizedMatmulBTConcat(x, {a, a}, MakeFloat({2, 5}, DType::kF32, RandomValues(10, 5))),
                       doctest::Contains("[quantized_matmul_bt_concat] out"), std::invalid_argument);
}
