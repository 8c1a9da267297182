// Gates of the fast CPU moe_matmul_bt (cpp/cpu/fast/gemv/moe_gemv.cpp, provider
// cpu_fast_moe_matmul_bt) in the op-case table against the oracle (cpu_moe_matmul_bt):
// every quantization format, one stack and gate|up as two stacks, x shared by a
// token's slots or one row per slot, one token (decode), a few and 40-48 tokens (an
// expert's pairs in several GEMV groups of up to 16), ids repeating an expert within
// a token, Qwen3-30B-A3B's expert shapes (gate/up 2048 -> 768 Q4_K, down 768 -> 2048
// Q4_K and Q6_K), f32/f16/bf16, on 1 and 2 threads; the experts no pair selects hold
// NaN weights (a read of them fails the case), outputs NaN-poisoned. Bar: the quantized
// GEMV's (test_cpu_fast_quantized.cpp; docs/cpu.md): NMSE <= 1e-7 and every element
// within 2e-4 of the largest magnitude for f32 outputs, 1e-6 and 4 unit roundoffs for
// f16/bf16.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "cpu/parallel.h"
#include "metalrt/op_registry.h"
#include "metalrt/ops.h"
#include "moe_testing.h"
#include "op_cases.h"

using namespace metalrt;
using namespace metalrt::testing;

namespace {

constexpr const char* kFast = "cpu_fast_moe_matmul_bt";
constexpr const char* kOracle = "cpu_moe_matmul_bt";

std::vector<WeightSpec> Specs() {
  return GgufSpecsAnd({{QuantFormat::kAffine, 4, 64, DType::kBF16}, {QuantFormat::kAffine, 8, 32, DType::kF16},
                       {QuantFormat::kAffine, 3, 128, DType::kF32}, kMxfp4Spec});
}

// The smallest K a format takes: its block or scale group.
int64_t MinK(const WeightSpec& s) { return IsKQuant(s.format) || (IsAffine(s) && s.group_size == 128) ? 256 : 64; }

// Ids with an expert repeated within each token: slot 1 repeats slot 0, the others
// drawn with replacement from [0, used).
std::vector<int32_t> RepeatedIds(int64_t tokens, int64_t slots, int64_t used, uint32_t seed) {
  std::mt19937 gen(seed);
  std::vector<int32_t> ids(static_cast<size_t>(tokens * slots));
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t j = 0; j < slots; ++j)
      ids[t * slots + j] = j == 1 ? ids[t * slots] : static_cast<int32_t>(gen() % used);
  return ids;
}

struct Variant {
  bool per_slot = false, gated = false, repeated = false;
  int threads = 2;
};

// experts >= used (the last two) are never selected and hold NaN weights.
OpCase FastCase(const WeightSpec& s, const MoeShape& g, DType dtype, Variant v, uint32_t seed) {
  const int64_t used = g.experts - 2, rows = g.experts * g.n, stacks = v.gated ? 2 : 1;
  const std::vector<int32_t> ids =
      v.repeated ? RepeatedIds(g.tokens, g.slots, used, seed) : RandomIds(g.tokens, g.slots, used, seed);
  const Shape x_shape = v.per_slot ? Shape{g.tokens, g.slots, g.k} : Shape{g.tokens, g.k};
  std::vector<Tensor> inputs{MakeFloat(x_shape, dtype, RandomValuesOf(dtype, Numel(x_shape), seed + 1)),
                             MakeInts({g.tokens, g.slots}, DType::kI32, ids)};
  size_t parts = 0;
  for (int64_t stack = 0; stack < stacks; ++stack) {
    std::vector<Tensor> w = RandomWeight(s, rows, g.k, seed + 2 + static_cast<uint32_t>(stack));
    PoisonRows(s, w, used * g.n, rows);
    parts = w.size();
    inputs.insert(inputs.end(), w.begin(), w.end());
  }
  OpCase c;
  c.name = CaseName("moe_matmul_bt", dtype, {g.tokens, g.slots, g.experts, g.k, g.n},
                    "cpu_fast_" + SpecName(s) + (v.gated ? "_gated" : "") + (v.per_slot ? "_per_slot" : "") +
                        (v.repeated ? "_repeated" : "") + "_t" + std::to_string(v.threads));
  c.op = "moe_matmul_bt";
  c.provider = kFast;
  c.device = DeviceType::kCPU;
  c.inputs = inputs;
  c.outputs = {{{g.tokens, g.slots, stacks * g.n}, dtype}};
  c.run = [s, g, v, rows, parts](const Inputs& in, const Outputs& out) {
    const cpu::ScopedParallelThreadLimit limit(v.threads);
    const QuantizedTensor w = WeightOf(s, rows, g.k, in, 2);
    if (v.gated) ops::MoeMatmulBT(in[0], w, WeightOf(s, rows, g.k, in, 2 + parts), in[1], g.experts, out[0]);
    else ops::MoeMatmulBT(in[0], w, in[1], g.experts, out[0]);
    return Returned{};
  };
  c.nmse = dtype == DType::kF32 ? 1e-7 : 1e-6;
  c.max_rel = dtype == DType::kF32 ? 2e-4 : 4 * UnitRoundoff(dtype);
  return c;
}

}  // namespace

METALRT_OP_CASES(cpu_fast_moe_cases) {
  std::vector<OpCase> cases;
  uint32_t seed = 17000;
  auto next = [&seed] { return seed += 7; };
  for (const WeightSpec& s : Specs()) {
    const int64_t k = MinK(s);
    cases.push_back(FastCase(s, {1, 8, 10, k, 40}, DType::kF32, {false, true, false, 2}, next()));   // decode gate|up
    cases.push_back(FastCase(s, {1, 8, 10, k, 72}, DType::kF32, {true, false, false, 1}, next()));   // decode down
    cases.push_back(FastCase(s, {3, 2, 8, k, 32}, DType::kF32, {false, false, true, 2}, next()));
    cases.push_back(FastCase(s, {48, 4, 8, k, 24}, DType::kF32, {false, true, false, 2}, next()));   // 2-3 groups an expert
    cases.push_back(FastCase(s, {40, 4, 8, k, 16}, DType::kBF16, {true, false, false, 1}, next()));
  }
  // The model's own dtypes, and a prefill with repeated experts.
  for (DType dtype : {DType::kF16, DType::kBF16}) {
    cases.push_back(FastCase({QuantFormat::kQ4_K}, {1, 8, 10, 256, 96}, dtype, {false, true, false, 2}, next()));
    cases.push_back(FastCase({QuantFormat::kQ8_0}, {5, 8, 10, 64, 64}, dtype, {true, false, false, 2}, next()));
  }
  cases.push_back(FastCase({QuantFormat::kQ4_1}, {33, 8, 10, 64, 40}, DType::kF32, {false, true, true, 2}, next()));
  // Qwen3-30B-A3B's experts (hidden 2048, expert intermediate 768, top-8; 10 of its 128
  // experts, 8 selectable): a decode step's gate|up and down, and a short prefill.
  cases.push_back(FastCase({QuantFormat::kQ4_K}, {1, 8, 10, 2048, 768}, DType::kF32, {false, true, false, 2}, next()));
  cases.push_back(FastCase({QuantFormat::kQ4_K}, {1, 8, 10, 768, 2048}, DType::kF32, {true, false, false, 2}, next()));
  cases.push_back(FastCase({QuantFormat::kQ6_K}, {1, 8, 10, 768, 2048}, DType::kF32, {true, false, false, 1}, next()));
  cases.push_back(FastCase({QuantFormat::kQ4_K}, {20, 8, 10, 2048, 96}, DType::kF32, {false, true, false, 2}, next()));
  // gpt-oss-20b's (MXFP4, 2880 -> 2880, top-4), a column slice of it.
  for (const WeightSpec& s : {kMxfp4Spec, WeightSpec{QuantFormat::kMxfp4Gguf}})
    cases.push_back(FastCase(s, {1, 4, 6, 2880, 128}, DType::kBF16, {false, true, false, 2}, next()));
  return cases;
}

TEST_CASE("cpu fast moe_matmul_bt: float stacks and a NaN x are declined to the oracle") {
  const int64_t experts = 4, n = 8, k = 64;
  const Tensor ids = MakeInts({1, 2}, DType::kI32, std::vector<int32_t>{2, 0});
  const Tensor w = MakeFloat({experts * n, k}, DType::kF32, RandomValues(experts * n * k, 17900));
  ResetProviderStats();
  ops::MoeMatmulBT(MakeFloat({1, k}, DType::kF32, RandomValues(k, 17901)), w, ids, experts);
  ProviderStats stats = GetProviderStats("moe_matmul_bt", DeviceType::kCPU);
  CHECK(stats.last_selected == kOracle);
  CHECK(stats.declines == 1);
  const WeightSpec s{QuantFormat::kQ4_K};
  const std::vector<Tensor> q = RandomWeight(s, experts * n, 256, 17902);
  std::vector<double> x = RandomValues(256, 17903);
  x[7] = std::numeric_limits<double>::quiet_NaN();
  ResetProviderStats();
  const Tensor out = ops::MoeMatmulBT(MakeFloat({1, 256}, DType::kF32, x), WeightOf(s, experts * n, 256, q, 0), ids,
                                      experts);
  stats = GetProviderStats("moe_matmul_bt", DeviceType::kCPU);
  CHECK(stats.last_selected == kOracle);
  CHECK(stats.declines == 1);
  for (double v : ReadFloat(out)) CHECK(std::isnan(v));   // the oracle propagates it
}

TEST_CASE("cpu fast moe_matmul_bt: the same bytes on 1 and 2 threads") {
  // Items split an expert's rows; a row's result never depends on its neighbours.
  for (const WeightSpec& s : {WeightSpec{QuantFormat::kQ4_K}, WeightSpec{QuantFormat::kQ4_1}}) {
    CAPTURE(SpecName(s));
    const int64_t experts = 6, n = 200, k = 256;
    const std::vector<Tensor> gate = RandomWeight(s, experts * n, k, 17910), up = RandomWeight(s, experts * n, k, 17911);
    for (int64_t tokens : {1, 21}) {
      const Tensor ids = MakeInts({tokens, 4}, DType::kI32, RandomIds(tokens, 4, experts, 17912));
      const Tensor x = MakeFloat({tokens, k}, DType::kF32, RandomValues(tokens * k, 17913));
      std::vector<Tensor> outs;
      for (int threads : {1, 2}) {
        const cpu::ScopedParallelThreadLimit limit(threads);
        outs.push_back(ops::MoeMatmulBT(x, WeightOf(s, experts * n, k, gate, 0), WeightOf(s, experts * n, k, up, 0),
                                        ids, experts));
      }
      CHECK(GetProviderStats("moe_matmul_bt", DeviceType::kCPU).last_selected == kFast);
      CHECK(std::memcmp(outs[0].data(), outs[1].data(), outs[0].nbytes()) == 0);
    }
  }
}

TEST_CASE("cpu fast moe_matmul_bt: the op cases' poisoned experts show in its output when selected") {
  // The poison proves a read of an unselected expert only if the fast provider turns it
  // into a non-finite output (NaN, or for MXFP4's 2^128 scales possibly inf), which
  // fails the op cases' bar.
  const int64_t experts = 4, n = 16;
  const std::vector<int32_t> ids{0, 3, 1, 2};   // pairs 1 and 3 select poisoned experts
  for (const WeightSpec& s : Specs()) {
    CAPTURE(SpecName(s));
    const int64_t k = MinK(s);
    std::vector<Tensor> w = RandomWeight(s, experts * n, k, 17920);
    PoisonRows(s, w, 2 * n, 4 * n);
    ResetProviderStats();
    const Tensor out = ops::MoeMatmulBT(MakeFloat({2, k}, DType::kF32, RandomValues(2 * k, 17921)),
                                        WeightOf(s, experts * n, k, w, 0), MakeInts({2, 2}, DType::kI32, ids), experts);
    CHECK(GetProviderStats("moe_matmul_bt", DeviceType::kCPU).last_selected == kFast);
    const std::vector<double> got = ReadFloat(out);
    for (int64_t pair = 0; pair < 4; ++pair)
      for (int64_t c = 0; c < n; ++c)
        CHECK(std::isfinite(got[static_cast<size_t>(pair * n + c)]) == (ids[static_cast<size_t>(pair)] < 2));
  }
}
