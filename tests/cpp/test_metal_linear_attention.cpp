// Gates of the Metal Gated-DeltaNet kernels (metal/causal_conv1d.metal, gdn_gating.metal,
// gated_delta_rule.metal) on the simulated device: op cases against the CPU oracle at the
// Qwen3-Next geometry (Hk 16, Hv 32, Dk = Dv = 128, conv kernel 4) and unusual ones
// (Hv = Hk, Dk != Dv), each mode at the chunk boundaries T = 1, 2, 63, 64, 65, 150;
// chunked against recurrent on the device; a prefill split inside a chunk; fast-decaying
// heads; which kernels a batch dispatches; heads the kernels decline.
#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

#include "linear_attention_testing.h"
#include "metal_op_testing.h"
#include "metalrt/ops.h"
#include "op_cases.h"

using namespace metalrt;
using namespace metalrt::testing;

namespace {

using ops::DeltaRuleMode;

const char* ModeName(DeltaRuleMode mode) {
  return mode == DeltaRuleMode::kRecurrent ? "recurrent" : mode == DeltaRuleMode::kChunked ? "chunked" : "auto";
}

// The kernels a batch dispatches under `mode`.
std::vector<std::string> DeltaKernels(const std::vector<int32_t>& lens, DeltaRuleMode mode, DType dtype) {
  bool recurrent = false, chunked = false;
  for (int32_t len : lens) {
    if (len == 0) continue;
    const bool as_chunks = mode == DeltaRuleMode::kChunked || (mode == DeltaRuleMode::kAuto && len > 1);
    (as_chunks ? chunked : recurrent) = true;
  }
  const std::string suffix = gpu::KernelDTypeSuffix(dtype);
  std::vector<std::string> kernels;
  if (recurrent) kernels.push_back("gated_delta_rule_recurrent_" + suffix);
  if (chunked) kernels.push_back("gated_delta_rule_chunked_" + suffix);
  return kernels;
}

// The kernels' f32 sums run in other orders than the oracle's (and the chunked kernel
// solves after subtracting the state's part): every element within 2e-5 of the largest
// output (the chunked solve mixes a chunk's rows); f16/bf16 outputs may round to the
// neighbouring value.
void SetDeltaBar(OpCase& c, DType dtype) {
  c.bar = OracleBar(dtype, 0.0, 0.0);
  c.max_rel = 2e-5;
}

OpCase DeltaCase(const std::string& name, const DeltaGeometry& geo, const std::vector<int32_t>& lens,
                 DeltaRuleMode mode, DType dtype, uint32_t seed, double a_shift = 0.0) {
  const DeltaBatch b = MakeDeltaBatch(geo, lens, dtype, seed, a_shift);
  OpCase c;
  c.name = std::string("gated_delta_rule/") + gpu::KernelDTypeSuffix(dtype) + "/" + name + "/" + ModeName(mode);
  c.op = "gated_delta_rule";
  c.provider = "metal_gated_delta_rule";
  c.kernels = DeltaKernels(lens, mode, dtype);
  c.inputs = {b.qkv, b.g, b.beta, b.state, b.query_start, b.state_slots};
  c.outputs = {{{b.qkv.dim(0), geo.hv, geo.dv}, dtype}};
  c.mutated_inputs = {3};
  const auto params = DeltaParams(geo, mode);
  c.run = [params](const Inputs& in, const Outputs& out) {
    ops::GatedDeltaRule(in[0], in[1], in[2], in[3], in[4], in[5], params, out[0]);
    return Returned{};
  };
  SetDeltaBar(c, dtype);
  return c;
}

OpCase ConvCase(const std::string& name, int64_t channels, int64_t width, const std::vector<int32_t>& lens,
                DType dtype, bool silu, uint32_t seed) {
  const std::vector<int32_t> starts = StartsOf(lens), slots = ScatteredSlots(lens.size(), seed);
  const int64_t tokens = starts.back(), pool = static_cast<int64_t>(2 * lens.size() + 1);
  OpCase c;
  c.name = std::string("causal_conv1d/") + gpu::KernelDTypeSuffix(dtype) + "/" + name + (silu ? "/silu" : "");
  c.op = "causal_conv1d";
  c.provider = "metal_causal_conv1d";
  bool decode = false, prefill = false;
  for (int32_t len : lens) {
    decode |= len == 1;
    prefill |= len > 1;
  }
  if (decode) c.kernels.push_back(std::string("causal_conv1d_decode_") + gpu::KernelDTypeSuffix(dtype));
  if (prefill) c.kernels.push_back(std::string("causal_conv1d_prefill_") + gpu::KernelDTypeSuffix(dtype));
  c.inputs = {MakeFloat({tokens, channels}, dtype, RandomValues(tokens * channels, seed, -2, 2)),
              MakeFloat({channels, width}, dtype, RandomValues(channels * width, seed + 1)),
              MakeFloat({pool, channels, width - 1}, dtype,
                        RandomValues(pool * channels * (width - 1), seed + 2, -2, 2)),
              MakeInts<int32_t>({static_cast<int64_t>(starts.size())}, DType::kI32, starts),
              MakeInts<int32_t>({static_cast<int64_t>(slots.size())}, DType::kI32, slots)};
  c.outputs = {{{tokens, channels}, dtype}};
  c.mutated_inputs = {2};
  c.run = [silu](const Inputs& in, const Outputs& out) {
    ops::CausalConv1d(in[0], in[1], in[2], in[3], in[4], silu, out[0]);
    return Returned{};
  };
  c.bar = OracleBar(dtype, 1e-6);
  return c;
}

OpCase GatingCase(int64_t tokens, int64_t heads, DType dtype, DType param_dtype, uint32_t seed) {
  std::vector<double> a = RandomValues(tokens * heads, seed, -8, 8);
  a[0] = 30.0;    // softplus' linear branch
  a[1] = -30.0;   // log1p of a tiny exp
  std::vector<double> a_log(heads);
  for (int64_t h = 0; h < heads; ++h) a_log[h] = std::log(0.01 + 16.0 * h / heads);
  OpCase c;
  c.name = std::string("gdn_gating/") + gpu::KernelDTypeSuffix(dtype) + "/" + std::to_string(tokens) + "x" +
           std::to_string(heads) + "/params_" + gpu::KernelDTypeSuffix(param_dtype);
  c.op = "gdn_gating";
  c.provider = "metal_gdn_gating";
  c.kernels = {gpu::KernelName("gdn_gating", gpu::KernelDTypeSuffix(dtype), param_dtype)};
  c.inputs = {MakeFloat({tokens, heads}, dtype, a),
              MakeFloat({tokens, heads}, dtype, RandomValues(tokens * heads, seed + 1, -8, 8)),
              MakeFloat({heads}, param_dtype, a_log),
              MakeFloat({heads}, param_dtype, RandomValues(heads, seed + 2, 0, 2))};
  c.run = [](const Inputs& in, const Outputs&) {
    const auto [g, beta] = ops::GdnGating(in[0], in[1], in[2], in[3]);
    return Returned{g, beta};
  };
  c.bar = {1e-6, 1e-30};
  return c;
}

}  // namespace

METALRT_OP_CASES(gated_delta_rule_cases) {
  std::vector<OpCase> cases;
  uint32_t seed = 1500;
  // Qwen3-Next: a two-chunk-plus prefill, a decode and a short prefill in one batch
  // (auto: both kernels), and a decode batch (the recurrent kernel only).
  for (DType dtype : kFloatDTypes)
    cases.push_back(DeltaCase("qwen3_next/prefill150_decode_prefill5", kQwen3Next, {150, 1, 5},
                              DeltaRuleMode::kAuto, dtype, seed += 10));
  cases.push_back(DeltaCase("qwen3_next/decode_batch4", kQwen3Next, {1, 1, 1, 1}, DeltaRuleMode::kAuto,
                            DType::kBF16, seed += 10));
  // Every mode at the chunk boundaries, unusual geometries.
  for (DeltaRuleMode mode : {DeltaRuleMode::kRecurrent, DeltaRuleMode::kChunked})
    for (int32_t len : {1, 2, 63, 64, 65, 150}) {
      cases.push_back(DeltaCase("hv2_hk2_dk64_dv128/T" + std::to_string(len), kEqualHeadsDk64Dv128, {len},
                                mode, DType::kF32, seed += 10));
      cases.push_back(DeltaCase("hv4_hk2_dk128_dv64/T" + std::to_string(len), kRatio2Dk128Dv64, {len}, mode,
                                DType::kF16, seed += 10));
    }
  // Requests of different lengths (an empty one) in scattered slots; odd head sizes.
  cases.push_back(DeltaCase("mixed_lengths", kRatio2Dk128Dv64, {3, 0, 64, 1, 70, 2}, DeltaRuleMode::kAuto,
                            DType::kBF16, seed += 10));
  cases.push_back(DeltaCase("hv3_hk1_dk33_dv31", {1, 33, 3, 31}, {66, 1}, DeltaRuleMode::kAuto, DType::kF32,
                            seed += 10));
  // Fast-decaying heads: g down to about -720, the chunk's cumulative decay to -46000.
  for (DeltaRuleMode mode : {DeltaRuleMode::kRecurrent, DeltaRuleMode::kChunked})
    cases.push_back(DeltaCase("fast_decay/T150", kEqualHeadsDk64Dv128, {150}, mode, DType::kF32, seed += 10,
                              40.0));
  return cases;
}

METALRT_OP_CASES(causal_conv1d_cases) {
  std::vector<OpCase> cases;
  uint32_t seed = 1700;
  // Qwen3-Next's conv over [q | k | v]: 2*16*128 + 32*128 channels, K = 4; requests of 1
  // and 2 tokens (fewer than K - 1), an empty one, a prefill; then a decode batch.
  for (DType dtype : kFloatDTypes) {
    cases.push_back(ConvCase("qwen3_next/mixed", 8192, 4, {1, 2, 0, 17, 1}, dtype, true, seed += 10));
    cases.push_back(ConvCase("qwen3_next/decode", 8192, 4, {1, 1, 1}, dtype, true, seed += 10));
  }
  cases.push_back(ConvCase("c37_k2/prefill", 37, 2, {5, 3}, DType::kF32, false, seed += 10));
  cases.push_back(ConvCase("c65_k5/mixed", 65, 5, {1, 3, 9}, DType::kF16, true, seed += 10));
  cases.push_back(ConvCase("c33_k1/no_state", 33, 1, {4, 1}, DType::kBF16, true, seed += 10));
  return cases;
}

METALRT_OP_CASES(gdn_gating_cases) {
  std::vector<OpCase> cases;
  uint32_t seed = 1900;
  for (DType dtype : kFloatDTypes) {
    cases.push_back(GatingCase(7, 32, dtype, DType::kF32, seed += 10));
    if (dtype != DType::kF32) cases.push_back(GatingCase(7, 32, dtype, dtype, seed += 10));
  }
  cases.push_back(GatingCase(300, 48, DType::kBF16, DType::kF32, seed += 10));   // partial threadgroup
  return cases;
}

TEST_CASE("metal gated_delta_rule: chunked against recurrent on the device, T = 1, 2, 63, 64, 65, 150") {
  for (int32_t len : {1, 2, 63, 64, 65, 150}) {
    CAPTURE(len);
    const DeltaBatch b = MakeDeltaBatch(kRatio2Dk128Dv64, {len}, DType::kF32, 300 + len);
    const DeltaRun rec = RunDelta(b, DeltaRuleMode::kRecurrent, DeviceType::kMETAL);
    const DeltaRun chk = RunDelta(b, DeltaRuleMode::kChunked, DeviceType::kMETAL);
    CheckDelta(chk.o, rec.o, DType::kF32, "o chunked vs recurrent");
    CheckDelta(chk.state, rec.state, DType::kF32, "state chunked vs recurrent");
    // And against the float64 recurrence.
    const DeltaReference ref = DeltaRuleReference(b, 1.0 / std::sqrt(128.0));
    CheckDelta(chk.o, ref.o, DType::kF32, "o chunked vs float64");
    CheckDelta(rec.o, ref.o, DType::kF32, "o recurrent vs float64");
  }
}

TEST_CASE("metal gated_delta_rule: a prefill split into two calls inside a chunk equals one call") {
  const DeltaBatch whole = MakeDeltaBatch(kQwen3Next, {150}, DType::kF32, 41);
  const DeltaRun one = RunDelta(whole, DeltaRuleMode::kChunked, DeviceType::kCPU);
  const Tensor state = CopyToDevice(whole.state, DeviceType::kMETAL);
  const Tensor slots = ToMetal(whole.state_slots);
  std::vector<double> o;
  for (const auto& [first, len] : {std::pair<int64_t, int32_t>{0, 37}, {37, 113}}) {
    const Tensor part = ops::GatedDeltaRule(
        ToMetal(whole.qkv.Slice(0, first, first + len)), ToMetal(whole.g.Slice(0, first, first + len)),
        ToMetal(whole.beta.Slice(0, first, first + len)), state,
        ToMetal(MakeInts<int32_t>({2}, DType::kI32, {0, len})), slots, DeltaParams(kQwen3Next, DeltaRuleMode::kAuto));
    const std::vector<double> values = ReadMetal(part);
    o.insert(o.end(), values.begin(), values.end());
  }
  CheckDelta(o, one.o, DType::kF32, "o split on Metal vs one call on the CPU");
  CheckDelta(ReadMetal(state), one.state, DType::kF32, "state split on Metal vs one call on the CPU");
}

TEST_CASE("metal gated_delta_rule: a decode batch under auto runs only the recurrent kernel") {
  const DeltaBatch b = MakeDeltaBatch(kRatio2Dk128Dv64, {1, 1, 1}, DType::kF16, 5);
  ResetProviderStats();
  const auto rows = ProfiledRows([&] { RunDelta(b, DeltaRuleMode::kAuto, DeviceType::kMETAL); });
  CHECK(Dispatches(rows, "gated_delta_rule_recurrent_f16") == 1);
  CHECK(Dispatches(rows, "gated_delta_rule_chunked_f16") == 0);
  CheckNativeProvider("gated_delta_rule", "metal_gated_delta_rule", 1);
}

TEST_CASE("metal gated_delta_rule: heads wider than 128 are declined to the reference tier") {
  const DeltaBatch b = MakeDeltaBatch({1, 160, 1, 16}, {3}, DType::kF32, 6);
  const DeltaRun ref = RunDelta(b, DeltaRuleMode::kAuto, DeviceType::kCPU);
  ResetProviderStats();
  const DeltaRun got = RunDelta(b, DeltaRuleMode::kAuto, DeviceType::kMETAL);
  const ProviderStats stats = GetProviderStats("gated_delta_rule", DeviceType::kMETAL);
  CHECK(stats.declines == 1);
  CHECK(stats.reference_hits == 1);
  CHECK(got.o == ref.o);
  CHECK(got.state == ref.state);
}
