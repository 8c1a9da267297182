// Gates of the fused q/k-norm + RoPE kernel (metal/qk_norm_rope.metal) on the kMETAL
// device: the op-case table against the CPU composite (rms_norm then rope_neox) at
// Qwen3's geometry (16 q heads, 8 kv heads, head_dim 128; T = 1 and 37; worst element
// <= 1e-4 in f32) and boundary shapes, every float dtype; and proof that one fused
// kernel ran — one profiler row, one dispatch — and equals the composite run on Metal
// bit for bit.
#include <doctest/doctest.h>

#include <string>
#include <tuple>
#include <vector>

#include "metal_op_testing.h"
#include "op_cases.h"

using namespace metalrt;
using namespace metalrt::testing;

namespace {

struct QkShape {
  int64_t tokens, heads, kv_heads, head_dim, rotary_dim;
};

constexpr float kEps = 1e-6f;
constexpr float kBase = 1e6f;   // Qwen3

std::vector<int32_t> Positions(int64_t tokens) {
  std::vector<int32_t> p(static_cast<size_t>(tokens));
  // Spread to 131072 (long context) with position 0 first.
  for (int64_t t = 0; t < tokens; ++t) p[t] = tokens == 1 ? 131072 : int32_t(t * 131072 / (tokens - 1));
  return p;
}

// q, k, q_weight, k_weight, positions on the CPU.
std::vector<Tensor> QkInputs(DType dtype, const QkShape& s, uint32_t seed) {
  const Shape q = {s.tokens, s.heads, s.head_dim}, k = {s.tokens, s.kv_heads, s.head_dim};
  return {MakeFloat(q, dtype, RandomValuesOf(dtype, Numel(q), seed, -3.0, 3.0)),
          MakeFloat(k, dtype, RandomValuesOf(dtype, Numel(k), seed + 1, -3.0, 3.0)),
          MakeFloat({s.head_dim}, dtype, RandomValuesOf(dtype, s.head_dim, seed + 2, 0.2, 1.8)),
          MakeFloat({s.head_dim}, dtype, RandomValuesOf(dtype, s.head_dim, seed + 3, 0.2, 1.8)),
          MakeInts<int32_t>({s.tokens}, DType::kI32, Positions(s.tokens))};
}

METALRT_OP_CASES(qk_norm_rope_cases) {
  const QkShape shapes[] = {
      {1, 16, 8, 128, 128},    // Qwen3 decode
      {37, 16, 8, 128, 128},   // Qwen3 prefill
      {1, 1, 1, 2, 2},         // the smallest head
      {3, 4, 2, 33, 16},       // odd head_dim, partial rotary
      {5, 2, 1, 257, 256},     // head_dim past the 256-thread row, pass-through of 1
  };
  std::vector<OpCase> cases;
  uint32_t seed = 4500;
  for (DType dtype : kFloatDTypes)
    for (const QkShape& s : shapes) {
      OpCase c;
      c.name = CaseName("qk_norm_rope", dtype, {s.tokens, s.heads, s.kv_heads, s.head_dim},
                        "rotary" + std::to_string(s.rotary_dim));
      c.op = "qk_norm_rope";
      c.provider = "metal_qk_norm_rope";
      c.kernels = {gpu::KernelName("qk_norm_rope", "fused", dtype)};
      c.inputs = QkInputs(dtype, s, seed);
      seed += 4;
      const int64_t rotary_dim = s.rotary_dim;
      c.run = [rotary_dim](const Inputs& in, const Outputs&) {
        auto [q, k] = ops::QkNormRope(in[0], in[1], in[2], in[3], in[4], kEps, rotary_dim, kBase);
        return Returned{q, k};
      };
      // f32: the sums of squares differ in order only, cos/sin by ~2.5e-7: worst <= 1e-4
      // (values are O(1)). f16/bf16 may round the stored intermediate to a neighbouring
      // value (one ulp of an element of the pair, at most 2u of the largest), and the
      // output too (2u of itself).
      const bool f32 = dtype == DType::kF32;
      c.bar = {f32 ? 0.0 : 2 * UnitRoundoff(dtype), 1e-4};
      c.max_rel = f32 ? 0.0 : 2 * UnitRoundoff(dtype);
      cases.push_back(c);
    }
  return cases;
}

}  // namespace

TEST_CASE("metal qk_norm_rope: one fused dispatch, bit-identical to rms_norm then rope_neox on Metal") {
  for (DType dtype : kFloatDTypes) {
    CAPTURE(std::string(DTypeName(dtype)));
    const QkShape s = {37, 16, 8, 128, 128};
    std::vector<Tensor> in;
    for (const Tensor& t : QkInputs(dtype, s, 4600)) in.push_back(ToMetal(t));
    ResetProviderStats();
    Tensor q_out, k_out;
    const auto rows = ProfiledRows([&] {
      std::tie(q_out, k_out) = ops::QkNormRope(in[0], in[1], in[2], in[3], in[4], kEps, s.rotary_dim, kBase);
    });
    // The profiler names exactly one kernel (then its total row), dispatched once for q
    // and k together.
    REQUIRE(rows.size() == 2);
    CHECK(rows[0].name == gpu::KernelName("qk_norm_rope", "fused", dtype));
    CHECK(rows[0].dispatches == 1);
    CHECK(rows[1].name == "total");
    CHECK(rows[1].dispatches == 1);
    CheckNativeProvider("qk_norm_rope", "metal_qk_norm_rope", 1);
    for (int i = 0; i < 2; ++i) {
      const Tensor& x = in[i];
      const Tensor composite = ops::RopeNeox(ops::RmsNorm(x, in[2 + i], kEps), in[4], s.rotary_dim, kBase);
      CHECK(Bytes(CopyToDevice(i == 0 ? q_out : k_out, DeviceType::kCPU)) ==
            Bytes(CopyToDevice(composite, DeviceType::kCPU)));
    }
  }
}
