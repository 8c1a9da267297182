// Gates of the CPU oracles of the Gated-DeltaNet ops (metalrt/linear_attention_ops.h):
// causal_conv1d and gdn_gating against float64; the recurrent and chunked delta rule
// against a float64 recurrence and against each other at chunk boundaries
// (T = 1, 2, 63, 64, 65, 150); the state carried across calls; batches of requests of
// different lengths in scattered slots; fast-decaying heads; bad inputs.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "linear_attention_testing.h"
#include "metalrt/errors.h"
#include "metalrt/ops.h"
#include "op_testing.h"

using namespace metalrt;
using namespace metalrt::testing;

namespace {

using ops::DeltaRuleMode;

Tensor Zeros(const Shape& shape, DType dtype) {
  Tensor t = Tensor::Empty(shape, dtype, DeviceType::kCPU);
  std::memset(t.data(), 0, t.nbytes());
  return t;
}

}  // namespace

TEST_CASE("gated_delta_rule: recurrent and chunked versus float64 at chunk boundaries") {
  const double scale = 1.0 / std::sqrt(128.0);
  for (int32_t len : {1, 2, 63, 64, 65, 150}) {
    CAPTURE(len);
    const DeltaBatch b = MakeDeltaBatch(kRatio2Dk128Dv64, {len}, DType::kF32, 100 + len);
    const DeltaReference ref = DeltaRuleReference(b, scale);
    for (DeltaRuleMode mode : {DeltaRuleMode::kRecurrent, DeltaRuleMode::kChunked, DeltaRuleMode::kAuto}) {
      CAPTURE(static_cast<int>(mode));
      const DeltaRun run = RunDelta(b, mode, DeviceType::kCPU);
      CheckDelta(run.o, ref.o, DType::kF32, "o");
      CheckDelta(run.state, ref.state, DType::kF32, "state");
    }
    // The two algorithms on the same inputs.
    const DeltaRun rec = RunDelta(b, DeltaRuleMode::kRecurrent, DeviceType::kCPU), chk = RunDelta(b, DeltaRuleMode::kChunked, DeviceType::kCPU);
    CHECK(Nmse(chk.o, rec.o) <= 1e-9);
    CHECK(Nmse(chk.state, rec.state) <= 1e-9);
  }
}

TEST_CASE("gated_delta_rule: the Qwen3-Next geometry and unusual ones, every dtype") {
  for (const DeltaGeometry& geo : {kQwen3Next, kEqualHeadsDk64Dv128, kRatio2Dk128Dv64})
    for (DType dtype : kFloatDTypes) {
      CAPTURE(geo.hv);
      CAPTURE(geo.dk);
      CAPTURE(std::string(DTypeName(dtype)));
      // A prefill crossing two chunk boundaries, a decode, a short prefill.
      const DeltaBatch b = MakeDeltaBatch(geo, {150, 1, 5}, dtype, 7);
      const DeltaReference ref = DeltaRuleReference(b, 1.0 / std::sqrt(double(geo.dk)));
      const DeltaRun run = RunDelta(b, DeltaRuleMode::kAuto, DeviceType::kCPU);
      CheckDelta(run.o, ref.o, dtype, "o");
      CheckDelta(run.state, ref.state, DType::kF32, "state (always f32)");
    }
}

TEST_CASE("gated_delta_rule: a prefill split into two calls inside a chunk equals one call") {
  // 150 tokens as 37 + 113: the second call's chunks start at token 37, so its chunk
  // boundaries fall inside the one call's chunks (the runner's chunked prefill).
  const DeltaBatch whole = MakeDeltaBatch(kEqualHeadsDk64Dv128, {150}, DType::kF32, 21);
  const DeltaRun one = RunDelta(whole, DeltaRuleMode::kChunked, DeviceType::kCPU);
  Tensor state = CopyToDevice(whole.state, DeviceType::kCPU);
  std::vector<double> o;
  for (const auto& [first, len] : {std::pair<int64_t, int64_t>{0, 37}, {37, 113}}) {
    const Tensor qkv = CopyToDevice(whole.qkv.Slice(0, first, first + len), DeviceType::kCPU);
    const Tensor g = CopyToDevice(whole.g.Slice(0, first, first + len), DeviceType::kCPU);
    const Tensor beta = CopyToDevice(whole.beta.Slice(0, first, first + len), DeviceType::kCPU);
    const Tensor starts = MakeInts<int32_t>({2}, DType::kI32, {0, static_cast<int32_t>(len)});
    const Tensor part = ops::GatedDeltaRule(qkv, g, beta, state, starts, whole.state_slots,
                                            DeltaParams(whole.geometry, DeltaRuleMode::kChunked));
    const std::vector<double> values = ReadFloat(part);
    o.insert(o.end(), values.begin(), values.end());
  }
  CheckDelta(o, one.o, DType::kF32, "o split vs whole");
  CheckDelta(ReadFloat(state), one.state, DType::kF32, "state split vs whole");
}

TEST_CASE("gated_delta_rule: requests of different lengths in scattered slots; other slots untouched") {
  const DeltaBatch b = MakeDeltaBatch(kRatio2Dk128Dv64, {3, 0, 64, 1, 70, 2}, DType::kBF16, 33);
  const DeltaReference ref = DeltaRuleReference(b, 1.0 / std::sqrt(128.0));
  for (DeltaRuleMode mode : {DeltaRuleMode::kRecurrent, DeltaRuleMode::kChunked, DeltaRuleMode::kAuto}) {
    const DeltaRun run = RunDelta(b, mode, DeviceType::kCPU);
    CheckDelta(run.o, ref.o, DType::kBF16, "o");
    // The reference leaves slots no request owns (and the empty request's) as they were.
    CHECK(run.state.size() == ref.state.size());
    CheckDelta(run.state, ref.state, DType::kF32, "state pool");
  }
}

TEST_CASE("gated_delta_rule: fast-decaying heads stay finite (A = 16, a + dt_bias up to 45)") {
  // g down to about -720 per token: exp(g) underflows to 0, and the chunked form's
  // cumulative decay reaches -46000 within a chunk; the difference form never divides.
  for (int32_t len : {2, 64, 150}) {
    const DeltaBatch b = MakeDeltaBatch(kEqualHeadsDk64Dv128, {len}, DType::kF32, 50 + len, 40.0);
    const DeltaReference ref = DeltaRuleReference(b, 1.0 / 8.0);
    for (DeltaRuleMode mode : {DeltaRuleMode::kRecurrent, DeltaRuleMode::kChunked}) {
      const DeltaRun run = RunDelta(b, mode, DeviceType::kCPU);
      bool finite = true;
      for (double x : run.o) finite &= std::isfinite(x);
      for (double x : run.state) finite &= std::isfinite(x);
      CHECK(finite);
      CheckDelta(run.o, ref.o, DType::kF32, "o");
      CheckDelta(run.state, ref.state, DType::kF32, "state");
    }
  }
}

TEST_CASE("causal_conv1d: versus float64, requests shorter than K - 1, state carried") {
  const int64_t channels = 37, width = 4;
  const std::vector<int32_t> lens = {1, 2, 0, 5, 17, 3};
  const std::vector<int32_t> starts = StartsOf(lens), slots = ScatteredSlots(lens.size(), 4);
  const int64_t tokens = starts.back(), pool = 2 * lens.size() + 1;
  for (DType dtype : kFloatDTypes)
    for (bool silu : {true, false}) {
      CAPTURE(std::string(DTypeName(dtype)));
      CAPTURE(silu);
      const Tensor x = MakeFloat({tokens, channels}, dtype, RandomValues(tokens * channels, 1, -2, 2));
      const Tensor w = MakeFloat({channels, width}, dtype, RandomValues(channels * width, 2));
      const Tensor state0 = MakeFloat({pool, channels, width - 1}, dtype,
                                      RandomValues(pool * channels * (width - 1), 3, -2, 2));
      const ConvReference ref = CausalConvReference(x, w, state0, starts, slots, silu);
      Tensor state = CopyToDevice(state0, DeviceType::kCPU);
      Tensor y = Poisoned({tokens, channels}, dtype);
      ops::CausalConv1d(x, w, state, MakeInts<int32_t>({7}, DType::kI32, starts),
                        MakeInts<int32_t>({6}, DType::kI32, slots), silu, y);
      CheckClose(ReadFloat(y), ref.y, RoundingBar(dtype, {1e-6, 1e-6}), "y");
      // The state holds input values moved, never rounded: exact.
      CHECK(ReadFloat(state) == ref.state);
    }
}

TEST_CASE("causal_conv1d: a prefill split into calls of 1, 2 and 6 tokens equals one call") {
  const int64_t channels = 9, width = 4;
  const Tensor x = MakeFloat({9, channels}, DType::kF32, RandomValues(9 * channels, 5));
  const Tensor w = MakeFloat({channels, width}, DType::kF32, RandomValues(channels * width, 6));
  const Tensor zeros = MakeFloat({1, channels, width - 1}, DType::kF32,
                                 std::vector<double>(channels * (width - 1), 0.0));
  const Tensor slot = MakeInts<int32_t>({1}, DType::kI32, {0});
  Tensor whole_state = CopyToDevice(zeros, DeviceType::kCPU);
  const Tensor whole = ops::CausalConv1d(x, w, whole_state, MakeInts<int32_t>({2}, DType::kI32, {0, 9}), slot, true);
  Tensor state = CopyToDevice(zeros, DeviceType::kCPU);
  std::vector<double> y;
  for (const auto& [first, len] : {std::pair<int64_t, int32_t>{0, 1}, {1, 2}, {3, 6}}) {
    const Tensor part = ops::CausalConv1d(CopyToDevice(x.Slice(0, first, first + len), DeviceType::kCPU), w,
                                          state, MakeInts<int32_t>({2}, DType::kI32, {0, len}), slot, true);
    const std::vector<double> values = ReadFloat(part);
    y.insert(y.end(), values.begin(), values.end());
  }
  CHECK(y == ReadFloat(whole));
  CHECK(ReadFloat(state) == ReadFloat(whole_state));
}

TEST_CASE("gdn_gating: versus float64, f32 gates from every dtype, extreme a") {
  const int64_t tokens = 5, heads = 8;
  std::vector<double> a = RandomValues(tokens * heads, 8, -6, 6);
  a[0] = 40.0;    // softplus' linear branch (x > 20)
  a[1] = -30.0;   // log1p of a tiny exp
  const std::vector<double> b = RandomValues(tokens * heads, 9, -8, 8);
  std::vector<double> a_log(heads), dt_bias = RandomValues(heads, 10, 0, 2);
  for (int64_t h = 0; h < heads; ++h) a_log[h] = std::log(1.0 + 15.0 * h / (heads - 1));
  for (DType dtype : kFloatDTypes)
    for (DType param_dtype : {DType::kF32, dtype}) {
      CAPTURE(std::string(DTypeName(dtype)));
      const Tensor ta = MakeFloat({tokens, heads}, dtype, a), tb = MakeFloat({tokens, heads}, dtype, b);
      const Tensor tl = MakeFloat({heads}, param_dtype, a_log), td = MakeFloat({heads}, param_dtype, dt_bias);
      const auto [g, beta] = ops::GdnGating(ta, tb, tl, td);
      CHECK(g.dtype() == DType::kF32);
      CHECK(beta.dtype() == DType::kF32);
      const std::vector<double> sa = ReadFloat(ta), sb = ReadFloat(tb), sl = ReadFloat(tl), sd = ReadFloat(td);
      std::vector<double> g_ref, beta_ref;
      for (int64_t i = 0; i < tokens * heads; ++i) {
        const double x = static_cast<float>(sa[i] + sd[i % heads]);
        g_ref.push_back(-std::exp(sl[i % heads]) * (x > 20 ? x : std::log1p(std::exp(x))));
        beta_ref.push_back(1 / (1 + std::exp(-sb[i])));
      }
      CheckClose(ReadFloat(g), g_ref, {1e-6, 0}, "g");
      CheckClose(ReadFloat(beta), beta_ref, {1e-6, 0}, "beta");
    }
}

TEST_CASE("linear attention ops: bad inputs are refused naming the argument") {
  const DeltaBatch b = MakeDeltaBatch({2, 8, 4, 8}, {3, 2}, DType::kF32, 1);
  const auto params = DeltaParams(b.geometry, DeltaRuleMode::kAuto);
  auto run = [&](const Tensor& qkv, const Tensor& state, const Tensor& starts, const Tensor& slots,
                 ops::GatedDeltaRuleParams p) {
    Tensor s = CopyToDevice(state, DeviceType::kCPU);
    ops::GatedDeltaRule(qkv, b.g, b.beta, s, starts, slots, p);
  };
  auto i32 = [](const std::vector<int32_t>& v) {
    return MakeInts<int32_t>({static_cast<int64_t>(v.size())}, DType::kI32, v);
  };
  auto p3 = params;
  p3.num_k_heads = 3;
  CheckThrows<std::invalid_argument>([&] { run(b.qkv, b.state, b.query_start, b.state_slots, p3); },
                                     "[gated_delta_rule] num_v_heads (4) must be a multiple of num_k_heads (3)");
  auto pw = params;
  pw.head_v_dim = 4;
  CheckThrows<std::invalid_argument>([&] { run(b.qkv, b.state, b.query_start, b.state_slots, pw); },
                                     "[gated_delta_rule] mixed_qkv must have");
  CheckThrows<std::invalid_argument>(
      [&] { run(b.qkv, Zeros({5, 4, 8, 4}, DType::kF32), b.query_start, b.state_slots, params); },
      "[gated_delta_rule] state must have shape");
  CheckThrows<TypeError>(
      [&] { run(b.qkv, Zeros({5, 4, 8, 8}, DType::kF16), b.query_start, b.state_slots, params); },
      "[gated_delta_rule] state must be float32");
  CheckThrows<std::invalid_argument>([&] { run(b.qkv, b.state, b.query_start, i32({1, 5}), params); },
                                     "[gated_delta_rule] request 1: state_slots value 5 is outside the state pool of 5 slots");
  CheckThrows<std::invalid_argument>([&] { run(b.qkv, b.state, b.query_start, i32({-1, 0}), params); },
                                     "[gated_delta_rule] request 0: state_slots value -1");
  CheckThrows<std::invalid_argument>([&] { run(b.qkv, b.state, b.query_start, i32({2, 2}), params); },
                                     "[gated_delta_rule] request 1: state slot 2 is used by an earlier request");
  CheckThrows<std::invalid_argument>([&] { run(b.qkv, b.state, i32({0, 3, 4}), b.state_slots, params); },
                                     "[gated_delta_rule] query_start must run from 0 to the 5 tokens");
  CheckThrows<std::invalid_argument>([&] { run(b.qkv, b.state, i32({0, 4, 3, 5}), i32({0, 1, 2}), params); },
                                     "[gated_delta_rule] request 1: query_start must be non-decreasing");
  CheckThrows<std::invalid_argument>([&] { run(b.qkv, b.state, i32({0, 4, 5}), i32({0}), params); },
                                     "[gated_delta_rule] state_slots must have shape [2]");

  // causal_conv1d: channels of the weight and state, dtype of the state, slots.
  const Tensor x = Zeros({4, 6}, DType::kF32);
  const Tensor w = Zeros({6, 4}, DType::kF32);
  const Tensor cs = Zeros({2, 6, 3}, DType::kF32);
  auto conv = [&](const Tensor& xx, const Tensor& ww, const Tensor& ss, const Tensor& slots) {
    ops::CausalConv1d(xx, ww, ss, i32({0, 4}), slots, true);
  };
  CheckThrows<std::invalid_argument>([&] { conv(x, Zeros({5, 4}, DType::kF32), cs, i32({0})); },
                                     "[causal_conv1d] weight must have one row per channel of x (6)");
  CheckThrows<std::invalid_argument>([&] { conv(x, w, Zeros({2, 6, 4}, DType::kF32), i32({0})); },
                                     "[causal_conv1d] conv_state must have shape [slots, 6, 3]");
  CheckThrows<TypeError>([&] { conv(x, w, Zeros({2, 6, 3}, DType::kF16), i32({0})); },
                         "[causal_conv1d] conv_state must have the dtype of x");
  CheckThrows<std::invalid_argument>([&] { conv(x, w, cs, i32({2})); },
                                     "[causal_conv1d] request 0: state_slots value 2 is outside the state pool of 2 slots");

  // gdn_gating: head counts and parameter dtypes.
  const Tensor a = Zeros({3, 4}, DType::kBF16);
  CheckThrows<std::invalid_argument>(
      [&] { ops::GdnGating(a, a, Zeros({5}, DType::kF32), Zeros({5}, DType::kF32)); },
      "[gdn_gating] A_log must have shape [4]");
  CheckThrows<TypeError>(
      [&] { ops::GdnGating(a, a, Zeros({4}, DType::kF16), Zeros({4}, DType::kF16)); },
      "[gdn_gating] A_log must be float32 or a's dtype");
}
