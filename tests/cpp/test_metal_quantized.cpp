// Gates of the Metal quantized-weight kernels (metal/quantized.metal) in the op-case
// table: quantized_matmul_bt (GEMV for m <= 8, GEMM above) against the CPU oracle with
// NMSE <= 1e-6 for f32 activations (5e-4 for f16/bf16) plus a per-element bound, and
// dequantize / quantized_embedding bit-exact, for every format and affine bit width and
// group size, at the boundary shapes of issue #13 (K = 64 ... 896, not a multiple of 256
// or 512; N = 1, 5, 8, 49152; m = 1..9, 33, 512), the wide GEMV chunk (gemv16, K >= 512)
// in every format at K = 512, 1536, 2048, 2080, and the model's shapes (gpt-oss-20b's
// for MXFP4, both layouts). Random scales include negative ones.
#include <doctest/doctest.h>

#include <cstring>

#include "metal_op_testing.h"
#include "metalrt/ops.h"
#include "op_cases.h"
#include "quantized_args.h"
#include "quantized_testing.h"

using namespace metalrt;
using namespace metalrt::testing;

namespace {

// The token of a weight's format in kernel names ("q4_1", "affine_bf16").
std::string FormatToken(const WeightSpec& s) {
  return IsAffine(s) ? std::string("affine_") + gpu::KernelDTypeSuffix(s.scales) : QuantFormatName(s.format);
}

OpCase MatmulCase(const WeightSpec& s, int64_t m, int64_t k, int64_t n, DType dtype, uint32_t seed) {
  const Tensor x = MakeFloat({m, k}, dtype, RandomValuesOf(dtype, m * k, seed));
  std::vector<Tensor> inputs{x};
  for (const Tensor& t : RandomWeight(s, n, k, seed + 1)) inputs.push_back(t);
  // m <= 8: the GEMV, with the wide chunk (gemv16) from K = 512 on (QuantGemvChunk;
  // the weights the tests make are aligned for it), so the profiler proves the width.
  const std::string variant = m > 8 ? "gemm_" : k >= 512 ? "gemv16_" : "gemv_";
  OpCase c = SingleOutputCase(CaseName("quantized_matmul_bt", dtype, {m, k, n}, SpecName(s)),
                              "quantized_matmul_bt",
                              gpu::KernelName("quantized_matmul_bt", variant + FormatToken(s), dtype),
                              inputs, {{m, n}, dtype}, {0.0, 0.0},
                              [s, n, k](const Inputs& in, const Tensor& out) {
                                ops::QuantizedMatmulBT(in[0], WeightOf(s, n, k, in, 1), out);
                              });
  // Both sides accumulate in f32 in different orders; f16/bf16 outputs may differ by a
  // rounding step or two.
  c.nmse = dtype == DType::kF32 ? 1e-6 : 5e-4;
  c.max_rel = dtype == DType::kF32 ? 1e-5 : 4 * UnitRoundoff(dtype);
  return c;
}

OpCase DequantizeCase(const WeightSpec& s, int64_t n, int64_t k, DType dtype, uint32_t seed) {
  OpCase c = SingleOutputCase(CaseName("dequantize", dtype, {n, k}, SpecName(s)), "dequantize",
                              gpu::KernelName("dequantize", "rows_" + FormatToken(s), dtype),
                              RandomWeight(s, n, k, seed), {{n, k}, dtype}, {0.0, 0.0},
                              [s, n, k, dtype](const Inputs& in, const Tensor& out) {
                                ops::Dequantize(WeightOf(s, n, k, in, 0), dtype, out);
                              });
  return BitExact(c);
}

OpCase EmbeddingCase(const WeightSpec& s, int64_t n, int64_t k, DType dtype, uint32_t seed) {
  std::vector<int32_t> ids{static_cast<int32_t>(n - 1), 0, static_cast<int32_t>(n / 2), 0};
  std::vector<Tensor> inputs{MakeInts({4}, DType::kI32, ids)};
  for (const Tensor& t : RandomWeight(s, n, k, seed)) inputs.push_back(t);
  OpCase c = SingleOutputCase(CaseName("quantized_embedding", dtype, {4, n, k}, SpecName(s)),
                              "quantized_embedding",
                              gpu::KernelName("quantized_embedding", "gather_" + FormatToken(s), dtype),
                              inputs, {{4, k}, dtype}, {0.0, 0.0},
                              [s, n, k, dtype](const Inputs& in, const Tensor& out) {
                                ops::QuantizedEmbedding(in[0], WeightOf(s, n, k, in, 1), dtype, out);
                              });
  return BitExact(c);
}

}  // namespace

METALRT_OP_CASES(quantized_cases) {
  std::vector<OpCase> cases;
  uint32_t seed = 13000;
  auto next = [&seed] { return seed += 7; };
  // GGUF: the 32-value formats at K = 64, 576, 896, the K-quants (blocks of 256) at
  // K = 256 and 768; m = 1..8 take the GEMV (N = 1, 5, 8 and ragged 13), m = 9, 33 and
  // 512 the GEMM (big m at small N, K to keep the simulated time small).
  // Split MXFP4 (a scale tensor of its own) takes the 32-value formats' shapes.
  for (const WeightSpec& s : GgufSpecsAnd({kMxfp4Spec})) {
    const QuantFormat f = s.format;
    const int64_t ks[] = {IsKQuant(f) ? 256 : 64, IsKQuant(f) ? 768 : 576, IsKQuant(f) ? 256 : 896};
    cases.push_back(MatmulCase(s, 1, ks[0], 1, DType::kF32, next()));
    cases.push_back(MatmulCase(s, 1, ks[1], 5, DType::kF32, next()));
    cases.push_back(MatmulCase(s, 2, ks[2], 8, DType::kF32, next()));
    cases.push_back(MatmulCase(s, 8, ks[1], 13, DType::kF32, next()));
    cases.push_back(MatmulCase(s, 9, ks[0], 5, DType::kF32, next()));
    cases.push_back(MatmulCase(s, 33, ks[2], 40, DType::kF32, next()));
    cases.push_back(MatmulCase(s, 3, ks[1], 8, DType::kBF16, next()));
    cases.push_back(MatmulCase(s, 33, ks[0], 8, DType::kF16, next()));
    cases.push_back(DequantizeCase(s, 5, ks[1], DType::kF32, next()));
    cases.push_back(DequantizeCase(s, 3, ks[0], DType::kBF16, next()));
    cases.push_back(EmbeddingCase(s, 7, ks[2], DType::kF32, next()));
  }
  // The default model's formats at its shapes: every m of decode, a prefill of 512 rows
  // at a small N, and the 49152-row vocabulary (m = 1 only: the simulated time).
  for (QuantFormat f : {QuantFormat::kQ4_1, QuantFormat::kQ8_0}) {
    const WeightSpec s{f};
    for (int64_t m = 3; m <= 7; ++m) cases.push_back(MatmulCase(s, m, 576, 8, DType::kF32, next()));
    cases.push_back(MatmulCase(s, 512, 64, 5, DType::kF32, next()));
    cases.push_back(EmbeddingCase(s, 49152, 576, DType::kF32, next()));
  }
  cases.push_back(MatmulCase(WeightSpec{QuantFormat::kQ8_0}, 1, 576, 49152, DType::kF32, next()));
  // down_proj (K = 1536, N = 576) and long rows at small N split K over the GEMV's
  // SIMD-groups (QuantGemvSplits), at m = 1 and 8, a K-quant and an affine weight.
  cases.push_back(MatmulCase(WeightSpec{QuantFormat::kQ4_1}, 1, 1536, 576, DType::kF32, next()));
  cases.push_back(MatmulCase(WeightSpec{QuantFormat::kQ8_0}, 8, 1536, 576, DType::kBF16, next()));
  cases.push_back(MatmulCase(WeightSpec{QuantFormat::kQ4_K}, 2, 1536, 5, DType::kF16, next()));
  cases.push_back(MatmulCase(WeightSpec{QuantFormat::kAffine, 4, 64, DType::kBF16}, 1, 1536, 13, DType::kF32, next()));
  // K = 32, one block or group per row: the GEMM's single K step (llama.cpp PR #3542
  // kept mul_mm away from K < 64).
  cases.push_back(MatmulCase(WeightSpec{QuantFormat::kQ8_0}, 17, 32, 9, DType::kF32, next()));
  cases.push_back(MatmulCase(WeightSpec{QuantFormat::kAffine, 4, 32, DType::kF16}, 17, 32, 9, DType::kF32, next()));
  cases.push_back(MatmulCase(WeightSpec{QuantFormat::kQ4_0}, 1, 32, 3, DType::kF32, next()));
  // MLX affine: every bit width at every group size, scales in each float dtype.
  const DType scale_dtypes[] = {DType::kF16, DType::kBF16, DType::kF32};
  int variant = 0;
  for (int bits : {4, 8, 2, 3, 5, 6})
    for (int gs : {32, 64, 128}) {
      const WeightSpec s{QuantFormat::kAffine, bits, gs, scale_dtypes[variant++ % 3]};
      const int64_t k = gs == 128 ? 896 : 576;
      cases.push_back(MatmulCase(s, 1, k, 5, DType::kF32, next()));
      cases.push_back(MatmulCase(s, 4, gs == 32 ? 64 : 128 * (gs / 64), 8, DType::kF32, next()));
      cases.push_back(MatmulCase(s, 9, k, 5, DType::kF32, next()));
      cases.push_back(DequantizeCase(s, 3, k, DType::kF32, next()));
      cases.push_back(EmbeddingCase(s, 5, k, DType::kBF16, next()));
    }
  // The wide GEMV chunk (16 values per lane and pass over whole passes of 512 values per
  // part, QuantGemvChunk) in every format: K = 512 (wide only), 2048 at a small N (K
  // split over both SIMD-groups, wide only), 1536 at N = 3072 (no split: 3 wide
  // passes), 2048 + 32 (a ragged 8-value tail); m = 1, 7, 8.
  std::vector<WeightSpec> wide_specs;
  for (const WeightSpec& s : GgufSpecsAnd({kMxfp4Spec})) wide_specs.push_back(s);
  for (int bits : {2, 3, 4, 5, 6, 8})
    wide_specs.push_back({QuantFormat::kAffine, bits, bits % 2 ? 32 : 64 * (bits % 4 ? 2 : 1),
                          scale_dtypes[bits % 3]});
  for (const WeightSpec& s : wide_specs) {
    cases.push_back(MatmulCase(s, 1, 512, 3, DType::kF32, next()));
    cases.push_back(MatmulCase(s, 7, 2048, 1, DType::kF16, next()));
    cases.push_back(MatmulCase(s, 8, 512, 13, DType::kBF16, next()));
    if (!IsKQuant(s.format) && (!IsAffine(s) || s.group_size == 32))
      cases.push_back(MatmulCase(s, 1, 2080, 5, DType::kF32, next()));
  }
  cases.push_back(MatmulCase(WeightSpec{QuantFormat::kQ4_0}, 1, 1536, 3072, DType::kF32, next()));
  cases.push_back(MatmulCase(WeightSpec{QuantFormat::kQ6_K}, 2, 2048, 49152 / 64, DType::kF32, next()));
  cases.push_back(MatmulCase(WeightSpec{QuantFormat::kQ4_1}, 1, 512, 49152, DType::kF32, next()));
  // The model's shapes: K = 576 (one wide pass, then 8-value chunks for 8 lanes), K =
  // 1536 split over both SIMD-groups (down_proj; 768 values per part: one wide pass and
  // one 8-value chunk per lane); K = 256 and 32, below one wide pass, stay on gemv.
  for (QuantFormat f : {QuantFormat::kQ4_1, QuantFormat::kQ8_0}) {
    const WeightSpec s{f};
    cases.push_back(MatmulCase(s, 1, 576, 192, DType::kF32, next()));
    cases.push_back(MatmulCase(s, 1, 576, 960, DType::kBF16, next()));
    cases.push_back(MatmulCase(s, 8, 576, 3072, DType::kF32, next()));
    cases.push_back(MatmulCase(s, 1, 1536, 1536, DType::kF32, next()));
    cases.push_back(MatmulCase(s, 7, 1536, 576, DType::kF16, next()));
    cases.push_back(MatmulCase(s, 8, 256, 3, DType::kF32, next()));
  }
  // Q3_K and Q2_K at the shapes of a hidden-768 model (the default's K = 576 holds no
  // 256-value block): the projections (K = 768), down_proj split (K = 2048), batched.
  for (QuantFormat f : {QuantFormat::kQ3_K, QuantFormat::kQ2_K}) {
    const WeightSpec s{f};
    cases.push_back(MatmulCase(s, 1, 768, 192, DType::kF32, next()));
    cases.push_back(MatmulCase(s, 1, 2048, 768, DType::kF32, next()));
    cases.push_back(MatmulCase(s, 5, 768, 96, DType::kBF16, next()));
    cases.push_back(MatmulCase(s, 64, 768, 40, DType::kF32, next()));
  }
  // MXFP4, both layouts, at gpt-oss-20b's shapes (hidden 2880 = 90 scale groups, no
  // whole wide pass per lane at the tail; q 4096 rows, k/v 512, o K = 4096), a decode
  // step, a batched decode and a prefill; the expert shapes are moe_matmul_bt's cases.
  for (const WeightSpec& s : {kMxfp4Spec, WeightSpec{QuantFormat::kMxfp4Gguf}}) {
    cases.push_back(MatmulCase(s, 1, 2880, 4096, DType::kF32, next()));
    cases.push_back(MatmulCase(s, 1, 4096, 2880, DType::kBF16, next()));
    cases.push_back(MatmulCase(s, 4, 2880, 512, DType::kBF16, next()));
    cases.push_back(MatmulCase(s, 40, 2880, 64, DType::kF32, next()));
    cases.push_back(DequantizeCase(s, 3, 2880, DType::kF32, next()));
    cases.push_back(EmbeddingCase(s, 2049, 2880, DType::kBF16, next()));
  }
  const WeightSpec affine4{QuantFormat::kAffine, 4, 64, DType::kBF16};
  cases.push_back(MatmulCase(affine4, 2, 576, 8, DType::kBF16, next()));
  cases.push_back(MatmulCase(affine4, 33, 576, 40, DType::kBF16, next()));
  cases.push_back(MatmulCase(affine4, 512, 64, 5, DType::kBF16, next()));
  cases.push_back(MatmulCase(affine4, 1, 64, 49152, DType::kF32, next()));
  return cases;
}

TEST_CASE("quantized GEMV chunk rule: wide from one whole wide pass per part on") {
  CHECK(QuantGemvChunk(512, 1, true) == kQuantWideChunk);
  CHECK(QuantGemvChunk(576, 1, true) == kQuantWideChunk);
  CHECK(QuantGemvChunk(1536, 2, true) == kQuantWideChunk);   // down_proj's split K
  CHECK(QuantGemvChunk(992, 2, true) == kQuantChunk);
  CHECK(QuantGemvChunk(480, 1, true) == kQuantChunk);
  CHECK(QuantGemvChunk(32, 1, true) == kQuantChunk);
  CHECK(QuantGemvChunk(512, 1, false) == kQuantChunk);   // data not aligned for word loads
}

// Weight data that is not 4-byte aligned (a view 2 bytes into its buffer, as a GGUF
// tensor can be in a mapped file) cannot take the wide chunk's word loads: the
// dispatch falls back to the 8-value GEMV, proven by the kernel name, with the same
// result as the aligned weight's wide GEMV.
TEST_CASE("metal quantized_matmul_bt: weight data not 4-byte aligned takes the 8-value GEMV") {
  const int64_t m = 1, k = 576, n = 5;
  for (QuantFormat f : {QuantFormat::kQ4_1, QuantFormat::kQ8_0}) {
    const WeightSpec s{f};
    CAPTURE(SpecName(s));
    const Tensor data = RandomWeight(s, n, k, 83)[0];
    const int64_t bytes = data.nbytes(), row_bytes = bytes / n;
    const Tensor x = MakeFloat({m, k}, DType::kF32, RandomValuesOf(DType::kF32, m * k, 84));
    const Tensor ref = ops::QuantizedMatmulBT(x, MakeQuantizedTensor(f, n, k, data));
    for (int64_t offset : {0, 2}) {
      CAPTURE(offset);
      Tensor padded = RandomBits({offset + bytes}, DType::kU8, 85);
      std::memcpy(padded.data_as<uint8_t>() + offset, data.data(), static_cast<size_t>(bytes));
      const Tensor view = ToMetal(padded).Slice(0, offset, offset + bytes).Reshape({n, row_bytes});
      const Tensor out = PoisonedMetal({m, n}, DType::kF32);
      const auto rows = ProfiledRows([&] { ops::QuantizedMatmulBT(ToMetal(x), MakeQuantizedTensor(f, n, k, view), out); });
      const std::string variant = offset == 0 ? "gemv16_" : "gemv_";
      CHECK(Dispatches(rows, gpu::KernelName("quantized_matmul_bt", variant + QuantFormatName(f), DType::kF32)) == 1u);
      CHECK(Nmse(ReadMetal(out), ReadFloat(ref)) <= 1e-6);
    }
  }
}

TEST_CASE("metal quantized_matmul_bt: f32 activations beyond the half range stay finite in the GEMM") {
  // A half-staged activation tile would overflow 65504 to inf (llama.cpp PR #26223).
  const WeightSpec s{QuantFormat::kQ8_0};
  const std::vector<Tensor> w = RandomWeight(s, 8, 64, 71);
  std::vector<double> values(static_cast<size_t>(16 * 64), 1.0e5);
  const Tensor x = MakeFloat({16, 64}, DType::kF32, values);
  const Tensor ref = ops::QuantizedMatmulBT(x, WeightOf(s, 8, 64, w, 0));
  std::vector<Tensor> metal_w{ToMetal(w[0])};
  const Tensor out = ops::QuantizedMatmulBT(ToMetal(x), WeightOf(s, 8, 64, metal_w, 0));
  const std::vector<double> got = ReadMetal(out), want = ReadFloat(ref);
  for (double v : want) REQUIRE(std::isfinite(v));
  CheckClose(got, want, {1e-5, 0.0}, "x = 1e5");
}
