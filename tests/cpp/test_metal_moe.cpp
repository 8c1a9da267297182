// Gates of the Metal MoE kernels (metal/moe_router.metal, moe_matmul.metal,
// moe_combine.metal) in the op-case table, against the CPU oracle (cpp/cpu/moe.cpp):
// * moe_router at a small MoE (8 experts top-2), Qwen3-MoE's 128 top-8 and Qwen3-Next's
//   512 top-10, T = 1, 3, 17, renormalize on/off, every float dtype; NaN / -inf / +inf
//   rows and ties (ids bit-exact, weights within 1e-5);
// * moe_matmul_bt for every quantization format and float32/f16/bf16 weights at the
//   small MoE's geometries (H = 64..256, I = 32..128) and gpt-oss-20b's (MXFP4), T = 1, 3, 17, x shared or one
//   row per slot, the experts no token selects poisoned with NaN (a kernel that reads
//   them fails); an out-of-range id on Metal (NaN row, no read), also with the gate and
//   up stacks as two operands;
// * moe_combine with and without the (gated) shared expert.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <random>
#include <set>

#include "cpu_oracle_testing.h"
#include "metal_op_testing.h"
#include "moe_testing.h"
#include "metalrt/ops.h"
#include "op_cases.h"
#include "quantized_testing.h"

using namespace metalrt;
using namespace metalrt::testing;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

OpCase RouterCase(const std::string& variant, const Tensor& logits, int64_t k, bool renormalize) {
  const int64_t t = logits.dim(0);
  OpCase c;
  c.name = CaseName("moe_router", logits.dtype(), logits.shape(),
                    variant + "k" + std::to_string(k) + (renormalize ? "_renorm" : ""));
  c.op = "moe_router";
  c.provider = "metal_moe_router";
  c.kernels = {gpu::KernelName("moe_router", "row", logits.dtype())};
  c.inputs = {logits};
  c.outputs = {{{t, k}, DType::kF32}, {{t, k}, DType::kI32}};
  c.run = [k, renormalize](const Inputs& in, const Outputs& out) {
    ops::MoeRouter(in[0], k, renormalize, out[0], out[1]);
    return Returned{};
  };
  // exp and the denominator's order differ; ids (int32) are compared bit for bit.
  c.bar = {1e-5, 1e-9};
  return c;
}

std::string FormatToken(const WeightSpec& s) {
  return IsAffine(s) ? std::string("affine_") + gpu::KernelDTypeSuffix(s.scales) : QuantFormatName(s.format);
}

// experts >= used are never selected and hold NaN weights.
OpCase MatmulCase(const WeightSpec* s, const MoeShape& g, DType dtype, bool per_slot, uint32_t seed) {
  const int64_t used = g.experts - 2, rows = g.experts * g.n;
  const std::vector<int32_t> ids = RandomIds(g.tokens, g.slots, used, seed);
  const Shape x_shape = per_slot ? Shape{g.tokens, g.slots, g.k} : Shape{g.tokens, g.k};
  std::vector<Tensor> inputs{MakeFloat(x_shape, dtype, RandomValuesOf(dtype, Numel(x_shape), seed + 1)),
                             MakeInts({g.tokens, g.slots}, DType::kI32, ids)};
  std::vector<Tensor> w;
  if (s) {
    w = RandomWeight(*s, rows, g.k, seed + 2);
    PoisonRows(*s, w, used * g.n, rows);
  } else {
    std::vector<double> values = RandomValuesOf(dtype, rows * g.k, seed + 2, -0.2, 0.2);
    std::fill(values.begin() + used * g.n * g.k, values.end(), kNaN);
    w = {MakeFloat({rows, g.k}, dtype, values)};
  }
  inputs.insert(inputs.end(), w.begin(), w.end());
  const std::string format = s ? FormatToken(*s) : "float";
  const std::string variant = (s ? SpecName(*s) : std::string("float")) + (per_slot ? "/per_slot" : "") +
                              "/e" + std::to_string(g.experts);
  // Batches beyond 8 tokens group the pairs by expert for the GEMM (K in steps of 32);
  // the GEMV takes 16 values per lane and pass from K = 512 on (QuantGemvChunk, no split).
  const bool grouped = g.tokens > 8 && g.k % 32 == 0;
  OpCase c = SingleOutputCase(
      CaseName("moe_matmul_bt", dtype, {g.tokens, g.slots, g.k, g.n}, variant), "moe_matmul_bt",
      gpu::KernelName("moe_matmul_bt", (grouped ? "gemm_" : g.k < 512 ? "gemv_" : "gemv16_") + format, dtype), inputs,
      {{g.tokens, g.slots, g.n}, dtype},
      {0.0, 0.0}, [s = s ? std::optional<WeightSpec>(*s) : std::nullopt, g, rows](const Inputs& in, const Tensor& out) {
        if (s) ops::MoeMatmulBT(in[0], WeightOf(*s, rows, g.k, in, 2), in[1], g.experts, out);
        else ops::MoeMatmulBT(in[0], in[2], in[1], g.experts, out);
      });
  if (grouped) c.kernels.insert(c.kernels.begin(), gpu::KernelName("moe_group_pairs", "", dtype));
  c.nmse = dtype == DType::kF32 ? 1e-6 : 5e-4;
  c.max_rel = dtype == DType::kF32 ? 1e-5 : 4 * UnitRoundoff(dtype);
  return c;
}

OpCase CombineCase(DType dtype, int64_t tokens, int64_t slots, int64_t n, int shared, uint32_t seed) {
  std::vector<Tensor> inputs{MakeFloat({tokens, slots, n}, dtype, RandomValuesOf(dtype, tokens * slots * n, seed)),
                             MakeFloat({tokens, slots}, DType::kF32, RandomValues(tokens * slots, seed + 1, 0.0, 1.0)),
                             MakeFloat({tokens, n}, dtype, RandomValuesOf(dtype, tokens * n, seed + 2)),
                             MakeFloat({tokens, 1}, dtype, RandomValuesOf(dtype, tokens, seed + 3, -4.0, 4.0))};
  OpCase c = SingleOutputCase(
      CaseName("moe_combine", dtype, {tokens, slots, n}, shared == 0 ? "" : shared == 1 ? "shared" : "gated_shared"),
      "moe_combine", gpu::KernelName("moe_combine", "", dtype), inputs, {{tokens, n}, dtype},
      OracleBar(dtype, 1e-6, 1e-7), [shared](const Inputs& in, const Tensor& out) {
        ops::MoeCombine(in[0], in[1], shared ? in[2] : Tensor(), shared == 2 ? in[3] : Tensor(), out);
      });
  return c;
}

}  // namespace

METALRT_OP_CASES(moe_router_cases) {
  std::vector<OpCase> cases;
  uint32_t seed = 15000;
  const int64_t geometries[][3] = {{1, 8, 2}, {3, 8, 2}, {17, 8, 2}, {3, 128, 8}, {17, 128, 8}, {1, 512, 10}, {17, 512, 10}};
  for (DType dtype : kFloatDTypes)
    for (const auto& g : geometries)
      for (bool renormalize : {false, true}) {
        const Tensor logits = MakeFloat({g[0], g[1]}, dtype, RandomValuesOf(dtype, g[0] * g[1], seed++, -4.0, 4.0));
        cases.push_back(RouterCase("", logits, g[2], renormalize));
      }
  // Rows a peer routed wrongly: all NaN (vllm#39391), all -inf, half NaN, two +inf,
  // all negative (vllm#37605), ties everywhere, and top_k = E.
  const int64_t e = 16;
  std::vector<double> v = RandomValues(7 * e, 15900, -3.0, 3.0);
  for (int64_t i = 0; i < e; ++i) {
    v[i] = kNaN;
    v[e + i] = -kInf;
    if (i % 2) v[2 * e + i] = kNaN;
    v[4 * e + i] = -50.0 - i;
    v[5 * e + i] = 1.5;
    v[6 * e + i] = std::floor(v[6 * e + i]);   // few distinct values: many ties
  }
  v[3 * e + 3] = v[3 * e + 9] = kInf;
  for (DType dtype : kFloatDTypes) {
    std::vector<double> rounded = v;
    for (double& x : rounded) x = RoundTo(x, dtype);
    const Tensor logits = MakeFloat({7, e}, dtype, rounded);
    for (int64_t k : {int64_t{4}, e}) cases.push_back(RouterCase("special_rows_", logits, k, true));
    cases.push_back(RouterCase("special_rows_", logits, 5, false));
  }
  return cases;
}

METALRT_OP_CASES(moe_matmul_cases) {
  std::vector<OpCase> cases;
  uint32_t seed = 15100;
  auto next = [&seed] { return seed += 7; };
  const WeightSpec formats[] = {{QuantFormat::kQ4_0}, {QuantFormat::kQ4_1}, {QuantFormat::kQ5_0},
                                {QuantFormat::kQ5_1}, {QuantFormat::kQ8_0}, {QuantFormat::kQ4_K},
                                {QuantFormat::kQ5_K}, {QuantFormat::kQ6_K},
                                {QuantFormat::kAffine, 4, 64, DType::kBF16},
                                {QuantFormat::kAffine, 8, 32, DType::kF16},
                                {QuantFormat::kAffine, 3, 128, DType::kF32},
                                {QuantFormat::kQ3_K}, {QuantFormat::kQ2_K},
                                {QuantFormat::kMxfp4Gguf}, kMxfp4Spec};
  // The small MoE of the issue: 8 experts top-2, H = 64..256 (K of gate/up), I = 32..128
  // (N of gate/up, K of down); K-quants need K = 256.
  for (const WeightSpec& s : formats) {
    const int64_t k = IsKQuant(s.format) || (IsAffine(s) && s.group_size == 128) ? 256 : 64;
    cases.push_back(MatmulCase(&s, {1, 2, 8, k, 32}, DType::kF32, false, next()));
    cases.push_back(MatmulCase(&s, {3, 2, 8, 256, 128}, DType::kF32, false, next()));
    cases.push_back(MatmulCase(&s, {17, 2, 8, k, 40}, DType::kBF16, true, next()));
  }
  for (DType dtype : kFloatDTypes) {
    cases.push_back(MatmulCase(nullptr, {1, 2, 8, 64, 32}, dtype, false, next()));
    cases.push_back(MatmulCase(nullptr, {3, 2, 8, 128, 64}, dtype, true, next()));
    cases.push_back(MatmulCase(nullptr, {17, 2, 8, 256, 128}, dtype, false, next()));
    cases.push_back(MatmulCase(nullptr, {17, 2, 8, 128, 256}, dtype, true, next()));   // down: K = I
  }
  // The wide GEMV chunk (gemv16) in every format and a float expert: K = 512, 576.
  for (const WeightSpec& s : formats)
    cases.push_back(MatmulCase(&s, {3, 2, 8, IsKQuant(s.format) || (IsAffine(s) && s.group_size == 128) ? 512 : 576, 8}, DType::kF32, false, next()));
  cases.push_back(MatmulCase(nullptr, {2, 2, 8, 544, 8}, DType::kBF16, true, next()));
  // Float K not a multiple of 32: a batch stays on the GEMV.
  cases.push_back(MatmulCase(nullptr, {17, 2, 8, 72, 24}, DType::kF32, false, next()));
  // A prefill-sized batch (GEMM tiles: several per expert, partial last tiles) and a
  // batch where some experts get no pair.
  cases.push_back(MatmulCase(&formats[1], {70, 2, 8, 64, 40}, DType::kF32, false, next()));
  cases.push_back(MatmulCase(&formats[11], {40, 2, 8, 256, 40}, DType::kF32, false, next()));   // Q3_K
  cases.push_back(MatmulCase(&formats[12], {40, 2, 8, 256, 40}, DType::kBF16, true, next()));   // Q2_K
  cases.push_back(MatmulCase(&formats[8], {40, 8, 128, 64, 16}, DType::kBF16, true, next()));
  // gpt-oss-20b's experts (MXFP4, hidden = intermediate = 2880, top-4; 6 of its 32
  // experts, 4 selectable: the simulated time): one token and a prefill batch.
  for (const WeightSpec* s : {&formats[13], &formats[14]}) {
    cases.push_back(MatmulCase(s, {1, 4, 6, 2880, 2880}, DType::kBF16, false, next()));
    cases.push_back(MatmulCase(s, {12, 4, 6, 2880, 64}, DType::kF32, true, next()));
  }
  // Qwen3-MoE-like top-8 of 128 experts at a small width, one token and a batch.
  cases.push_back(MatmulCase(&formats[4], {1, 8, 128, 64, 16}, DType::kF32, false, next()));
  cases.push_back(MatmulCase(&formats[8], {3, 8, 128, 64, 16}, DType::kF16, false, next()));
  return cases;
}

METALRT_OP_CASES(moe_combine_cases) {
  std::vector<OpCase> cases;
  uint32_t seed = 15500;
  for (DType dtype : kFloatDTypes)
    for (int shared : {0, 1, 2}) {
      cases.push_back(CombineCase(dtype, 1, 2, 64, shared, seed += 5));
      cases.push_back(CombineCase(dtype, 17, 8, 257, shared, seed += 5));
    }
  cases.push_back(CombineCase(DType::kF32, 3, 10, 2048, 2, seed += 5));
  return cases;
}

TEST_CASE("metal moe_matmul_bt: an id outside [0, E) gives a NaN row and reads no weight") {
  // Possible only on Metal, where the host does not read the ids (the CPU raises). Both
  // paths: the GEMV (2 tokens) and the grouped GEMM (9 tokens). The row was zero, which
  // passes for a result; NaN never does. The output is filled with a finite value, not
  // the NaN poison, so that the NaN rows show the kernel wrote them.
  const WeightSpec s{QuantFormat::kQ4_1};
  const int64_t experts = 4, n = 24, k = 64;
  const std::vector<Tensor> w = RandomWeight(s, experts * n, k, 15700);
  const std::vector<Tensor> metal_w{ToMetal(w[0])};
  for (int64_t tokens : {2, 9}) {
    CAPTURE(tokens);
    std::vector<int32_t> ids = RandomIds(tokens, 2, experts, 15701 + static_cast<uint32_t>(tokens));
    const Tensor x = MakeFloat({tokens, k}, DType::kF32, RandomValues(tokens * k, 15702));
    const OracleOnly oracle("moe_matmul_bt");   // the reference, not the fast CPU provider
    const Tensor ref = ops::MoeMatmulBT(x, WeightOf(s, experts * n, k, w, 0), MakeInts({tokens, 2}, DType::kI32, ids),
                                        experts);
    const int32_t bad[] = {4, -1, 2147483647};
    const int64_t bad_pairs[] = {1, 2, 2 * tokens - 1};
    for (int i = 0; i < 3; ++i) ids[static_cast<size_t>(bad_pairs[i])] = bad[i];
    CHECK_THROWS_AS(ops::MoeMatmulBT(x, WeightOf(s, experts * n, k, w, 0), MakeInts({tokens, 2}, DType::kI32, ids),
                                     experts),
                    std::invalid_argument);
    const Tensor out = ToMetal(MakeFloat({tokens, 2, n}, DType::kF32,
                                         std::vector<double>(static_cast<size_t>(tokens * 2 * n), 7.0)));
    ops::MoeMatmulBT(ToMetal(x), WeightOf(s, experts * n, k, metal_w, 0),
                     ToMetal(MakeInts({tokens, 2}, DType::kI32, ids)), experts, out);
    const std::vector<double> got = ReadMetal(out), want = ReadFloat(ref);
    for (int64_t pair = 0; pair < 2 * tokens; ++pair) {
      const bool bad_id = std::find(std::begin(bad_pairs), std::end(bad_pairs), pair) != std::end(bad_pairs);
      for (int64_t c = 0; c < n; ++c) {
        const size_t i = static_cast<size_t>(pair * n + c);
        if (bad_id) CHECK(std::isnan(got[i]));
        else CHECK(std::fabs(got[i] - want[i]) <= 1e-5 * std::fabs(want[i]) + 1e-6);
      }
    }
  }
}

TEST_CASE("metal moe_matmul_bt: gate and up stacks as two operands, a bad id NaN in both halves") {
  // The two stacks in two buffers (as a file's no-copy windows may put them): each
  // half within 1e-5 of the CPU oracle's; a bad id's whole row of 2N NaN, GEMV and GEMM.
  // Q8_0, and split MXFP4 (gpt-oss's gate_up, its scales a tensor of each stack's own).
  for (const WeightSpec& s : {WeightSpec{QuantFormat::kQ8_0}, kMxfp4Spec}) {
    const int64_t experts = 4, n = 24, k = 64;
    const std::vector<Tensor> gate = RandomWeight(s, experts * n, k, 15900), up = RandomWeight(s, experts * n, k, 15901);
    std::vector<Tensor> metal_gate, metal_up;
    for (const Tensor& t : gate) metal_gate.push_back(ToMetal(t));
    for (const Tensor& t : up) metal_up.push_back(ToMetal(t));
    for (int64_t tokens : {2, 9}) {
      CAPTURE(SpecName(s));
      CAPTURE(tokens);
      std::vector<int32_t> ids = RandomIds(tokens, 2, experts, 15902 + static_cast<uint32_t>(tokens));
      const Tensor x = MakeFloat({tokens, k}, DType::kF32, RandomValues(tokens * k, 15903));
      const OracleOnly oracle("moe_matmul_bt");   // the reference, not the fast CPU provider
      const Tensor ref = ops::MoeMatmulBT(x, WeightOf(s, experts * n, k, gate, 0), WeightOf(s, experts * n, k, up, 0),
                                          MakeInts({tokens, 2}, DType::kI32, ids), experts);
      const int64_t bad_pair = 2 * tokens - 1;
      ids[static_cast<size_t>(bad_pair)] = experts;
      const Tensor out = ToMetal(MakeFloat({tokens, 2, 2 * n}, DType::kF32,
                                           std::vector<double>(static_cast<size_t>(tokens * 4 * n), 7.0)));
      ops::MoeMatmulBT(ToMetal(x), WeightOf(s, experts * n, k, metal_gate, 0), WeightOf(s, experts * n, k, metal_up, 0),
                       ToMetal(MakeInts({tokens, 2}, DType::kI32, ids)), experts, out);
      const std::vector<double> got = ReadMetal(out), want = ReadFloat(ref);
      for (int64_t pair = 0; pair < 2 * tokens; ++pair)
        for (int64_t c = 0; c < 2 * n; ++c) {
          const size_t i = static_cast<size_t>(pair * 2 * n + c);
          if (pair == bad_pair) CHECK(std::isnan(got[i]));
          else CHECK(std::fabs(got[i] - want[i]) <= 1e-5 * std::fabs(want[i]) + 1e-6);
        }
    }
  }
}

TEST_CASE("metal moe_matmul_bt: the NaN poison of the op cases is seen when its expert is selected") {
  // The op cases poison the unselected experts; this shows the poison would reach the
  // output of a kernel that read them, for a GGUF, an affine and a float weight.
  const int64_t experts = 4, n = 16, k = 64;
  const std::vector<int32_t> ids{0, 3, 1, 2};   // pairs 1 and 3 select poisoned experts
  const Tensor x = MakeFloat({2, k}, DType::kF32, RandomValues(2 * k, 15800));
  const WeightSpec specs[] = {{QuantFormat::kQ4_1}, {QuantFormat::kAffine, 4, 32, DType::kF16},
                              {QuantFormat::kMxfp4Gguf}, kMxfp4Spec};
  for (DeviceType device : {DeviceType::kCPU, DeviceType::kMETAL}) {
    CAPTURE(DeviceTypeName(device));
    // On the CPU the oracle, the op cases' reference (the fast provider's own poison
    // check: test_cpu_fast_moe.cpp).
    const OracleOnly oracle("moe_matmul_bt");
    const Tensor dev_x = CopyToDevice(x, device), dev_ids = CopyToDevice(MakeInts({2, 2}, DType::kI32, ids), device);
    std::vector<Tensor> outputs;
    for (const WeightSpec& s : specs) {
      std::vector<Tensor> w = RandomWeight(s, experts * n, k, 15801);
      PoisonRows(s, w, 2 * n, 4 * n);
      for (Tensor& t : w) t = CopyToDevice(t, device);
      outputs.push_back(ops::MoeMatmulBT(dev_x, WeightOf(s, experts * n, k, w, 0), dev_ids, experts));
    }
    std::vector<double> values = RandomValues(experts * n * k, 15802);
    std::fill(values.begin() + 2 * n * k, values.end(), kNaN);
    outputs.push_back(ops::MoeMatmulBT(dev_x, CopyToDevice(MakeFloat({experts * n, k}, DType::kF32, values), device),
                                       dev_ids, experts));
    for (const Tensor& out : outputs) {
      const std::vector<double> got = ReadFloat(CopyToDevice(out, DeviceType::kCPU));
      for (int64_t pair = 0; pair < 4; ++pair)
        CHECK(std::isnan(got[static_cast<size_t>(pair * n)]) == (ids[static_cast<size_t>(pair)] >= 2));
    }
  }
}
