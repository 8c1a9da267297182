// Gates of the CPU device's prefill attention providers (cpp/cpu/fast/prefill/*paged_attention*)
// in the op-case table: against the oracle (the providers disabled) at the default
// model's geometry (9 heads, 3 kv heads, head_dim 64) for 128- and 512-token prefills,
// a chunked prefill and a mixed batch, and at boundary shapes (head_dim 1/33/96, query
// blocks of 31/32/33 queries, a request with no query, a GQA group of 10, block sizes
// 1 and 5). Every cache slot a request does not own is NaN, so a read outside a context
// fails. The f32 sgemms (cpu_blas_paged_attention, under METALRT_CPU_GEMM=f32): f32 NMSE
// <= 1e-10 and every element within 1e-5 (outputs are convex combinations of values in
// [-1, 1]; only the order of the f32 sums differs); f16/bf16 may round one ulp the other
// way. The bf16 products (cpu_bf16_paged_attention, METALRT_CPU_GEMM=bf16, on each bf16
// kernel of the CPU; even head_dim, batches of more than 16 tokens): NMSE <= 5e-5 and every element within 1e-2 of the
// oracle: q, k, the softmax weights and v are rounded to bf16 (relative 2^-9 each), and
// an output is a sum of up to n weighted values in [-1, 1] whose cancellation leaves it
// small, so its error is set against the values' scale, not its own (measured: NMSE
// ~5e-6, worst 3e-3). Built without a BLAS, no case is registered.
// Both read the cache a tile of kKeyTile positions at a time: their K/V scratch is the
// same bytes at a 1,000- and a 6,000-position context (TileScratchHighWater), and their
// output there is against the float64 reference within the bars above.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "cpu/fast/prefill/gemm_bf16.h"
#include "cpu/fast/prefill/prefill_attention.h"
#include "cpu/fast/simd/cpu_features.h"
#include "cpu_bf16_testing.h"
#include "metalrt/op_registry.h"
#include "metalrt/ops.h"
#include "op_cases.h"
#include "paged_attention_testing.h"

using namespace metalrt;
using namespace metalrt::testing;

namespace {

constexpr bool kHaveBlas = std::strcmp(METALRT_BLAS_NAME, "none") != 0;
constexpr const char* kProvider = "cpu_blas_paged_attention";
constexpr const char* kBf16Provider = "cpu_bf16_paged_attention";
using cpu::fast::PrefillGemm;

const std::vector<AttentionCase> kCases = {
    {"smollm2/prefill128", 9, 3, 64, 16, {{128, 128}}},
    {"smollm2/prefill512", 9, 3, 64, 16, {{512, 512}}},
    {"smollm2/chunked_prefill_and_decode", 9, 3, 64, 16, {{100, 300}, {1, 33}}},
    {"head_dim1", 2, 1, 1, 16, {{1, 3}, {3, 3}}},
    {"head_dim33", 4, 2, 33, 16, {{1, 33}, {7, 31}}},
    {"head_dim96", 3, 1, 96, 16, {{1, 15}, {2, 16}}},
    {"query_blocks31_32_33_and_empty", 4, 2, 64, 16, {{31, 31}, {0, 5}, {32, 40}, {33, 33}}},
    {"gqa10", 20, 2, 64, 16, {{1, 21}, {11, 26}}},
    {"block_size1", 4, 2, 64, 1, {{1, 9}, {6, 6}}},
    {"block_size5", 6, 3, 128, 5, {{1, 23}, {10, 18}}},
};

// The bf16 products serve batches of more than kGemvMaxRows = 16 tokens (fewer are
// projected by the f32 GEMV): kCases' that are, and the boundaries of those that are not.
const std::vector<AttentionCase> kBf16Boundaries = {
    {"head_dim96/t20", 3, 1, 96, 16, {{1, 15}, {19, 40}}},
    {"gqa10/t20", 20, 2, 64, 16, {{1, 21}, {19, 26}}},
    {"block_size1/t17", 4, 2, 64, 1, {{1, 9}, {16, 16}}},
    {"block_size5/t18", 6, 3, 128, 5, {{1, 23}, {17, 18}}},
};

OpCase MakeCase(const AttentionCase& a, DType dtype, uint32_t seed, PrefillGemm gemm) {
  AttentionGeometry g{a.heads, a.kv_heads, a.head_dim, a.block_size, 0, 0};
  const AttentionBatch bt = MakeAttentionBatch(ShuffledRequests(a.lens, g, seed), g, dtype, seed);
  const bool bf16 = gemm == PrefillGemm::kBf16;
  OpCase c;
  c.name = std::string("paged_attention/") + DTypeName(dtype) + "/" + a.name + (bf16 ? "/cpu_bf16" : "/cpu_blas");
  c.op = "paged_attention";
  c.provider = bf16 ? kBf16Provider : kProvider;
  c.device = DeviceType::kCPU;
  c.inputs = {bt.query, bt.key_cache, bt.value_cache, bt.block_tables, bt.seq_lens, bt.query_start_loc};
  c.outputs = {{bt.query.shape(), dtype}};
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(a.head_dim)));
  c.run = [scale](const Inputs& in, const Outputs& out) {
    ops::PagedAttention(in[0], in[1], in[2], in[3], in[4], in[5], scale, out[0], /*coarse_projections=*/true);
    return Returned{};
  };
  RunUnder(c, "METALRT_CPU_GEMM", cpu::fast::PrefillGemmName(gemm));
  if (bf16) {
    c.nmse = 5e-5;
    c.bar = {dtype == DType::kF32 ? 0.0 : 2 * UnitRoundoff(dtype), 1e-2};
  } else {
    c.nmse = dtype == DType::kF32 ? 1e-10 : 5e-4;
    c.bar = {dtype == DType::kF32 ? 0.0 : 2 * UnitRoundoff(dtype), 1e-5};
  }
  return c;
}

}  // namespace

METALRT_OP_CASES(cpu_fast_attention_cases) {
  std::vector<OpCase> cases;
  uint32_t seed = 1400;
  // The f32 sgemms where the build has a BLAS; the bf16 products (ours) on every build.
  if (kHaveBlas) {
    for (const AttentionCase& a : kCases) cases.push_back(MakeCase(a, DType::kF32, seed += 10, PrefillGemm::kF32));
    for (DType dtype : {DType::kF16, DType::kBF16})
      for (const AttentionCase& a : {kCases[2], kCases[6]})
        cases.push_back(MakeCase(a, dtype, seed += 10, PrefillGemm::kF32));
  }
  if (!cpu::fast::CpuHasAvx512Bf16()) return cases;
  std::vector<OpCase> bf16;
  const auto tokens = [](const AttentionCase& a) {
    int64_t t = 0;
    for (const auto& [q_len, seq_len] : a.lens) t += q_len;
    return t;
  };
  for (const std::vector<AttentionCase>* list : {&kCases, &kBf16Boundaries})
    for (const AttentionCase& a : *list)
      if (a.head_dim % 2 == 0 && tokens(a) > 16) bf16.push_back(MakeCase(a, DType::kF32, seed += 10, PrefillGemm::kBf16));
  for (DType dtype : {DType::kF16, DType::kBF16})
    for (const AttentionCase& a : {kCases[2], kCases[6]})
      bf16.push_back(MakeCase(a, dtype, seed += 10, PrefillGemm::kBf16));
  for (cpu::fast::Bf16Kernel kernel : Bf16Kernels())
    for (const OpCase& c : bf16) cases.push_back(OnKernel(c, kernel));
  return cases;
}

TEST_CASE("cpu fast attention: decode-only batches are declined; a prefill gets the bf16 products where its projections' GEMMs run on bf16, else the f32 sgemms") {
  const bool has_bf16 = cpu::fast::CpuHasAvx512Bf16();
  std::vector<std::string> settings{"auto", "f32"};
  if (has_bf16) settings.push_back("bf16");
  for (const std::string& gemm : settings) {
    for (bool coarse : {true, false}) {
      // Decode only; a prefill of 9 tokens (projected by the f32 GEMV); of 20.
      for (const Lens& lens : {Lens{{1, 5}, {1, 40}}, Lens{{9, 30}}, Lens{{20, 30}}}) {
        const bool prefill = lens[0].first > 1, gemm_rows = lens[0].first > 16;
        CAPTURE(gemm);
        CAPTURE(coarse);
        CAPTURE(prefill);
        AttentionGeometry g{6, 2, 64, 16, 0, 0};
        const AttentionBatch bt = MakeAttentionBatch(ShuffledRequests(lens, g, 11), g, DType::kF32);
        setenv("METALRT_CPU_GEMM", gemm.c_str(), 1);
        ResetProviderStats();
        ops::PagedAttention(bt.query, bt.key_cache, bt.value_cache, bt.block_tables, bt.seq_lens,
                            bt.query_start_loc, 0.125f, Poisoned(bt.query.shape(), DType::kF32), coarse);
        unsetenv("METALRT_CPU_GEMM");
        const ProviderStats stats = GetProviderStats("paged_attention", DeviceType::kCPU);
        CHECK(stats.calls == 1);
        const bool bf16 = gemm_rows && (gemm == "bf16" || (gemm == "auto" && coarse && has_bf16));
        if (prefill && (bf16 || kHaveBlas)) CHECK(stats.last_selected == (bf16 ? kBf16Provider : kProvider));
        else CHECK((stats.last_selected != kProvider && stats.last_selected != kBf16Provider));
      }
    }
  }
}

TEST_CASE("cpu fast attention: the prefill providers convert the cache a tile at a time, so their K/V scratch does not grow with the context") {
  namespace pa = cpu::fast::prefill_attention;
  const int64_t d = 64;
  // bytes: the f32 sgemms' key and value tiles; the bf16 products' f32 tile,
  // its bf16 keys, V^T and its packing.
  std::vector<std::pair<std::string, int64_t>> settings;
  if (kHaveBlas) settings.push_back({"f32", pa::kKeyTile * d * 4 * 2});
  if (cpu::fast::CpuHasAvx512Bf16())
    settings.push_back({"bf16", pa::kKeyTile * d * (4 + 4 + 2) + cpu::fast::Bf16PackedSize(d, pa::kKeyTile) * 4});
  for (const auto& [gemm, bytes] : settings) {
    for (int32_t context : {1000, 6000}) {
      CAPTURE(gemm);
      CAPTURE(context);
      // A 64-query chunk at the end of the context (the default model's geometry).
      AttentionGeometry g{9, 3, d, 16, 0, 0};
      const std::vector<AttentionRequest> reqs = ShuffledRequests({{64, context}}, g, 23);
      const AttentionBatch bt = MakeAttentionBatch(reqs, g, DType::kF32);
      const Tensor out = Poisoned(bt.query.shape(), DType::kF32);
      setenv("METALRT_CPU_GEMM", gemm.c_str(), 1);
      ResetProviderStats();
      pa::ResetTileScratchHighWater();
      ops::PagedAttention(bt.query, bt.key_cache, bt.value_cache, bt.block_tables, bt.seq_lens, bt.query_start_loc,
                          0.125f, out, /*coarse_projections=*/true);
      unsetenv("METALRT_CPU_GEMM");
      CHECK(GetProviderStats("paged_attention", DeviceType::kCPU).last_selected ==
            (gemm == "bf16" ? kBf16Provider : kProvider));
      CHECK(pa::TileScratchHighWater() == bytes);
      const std::vector<double> ref = AttentionReference(bt, reqs, g, 0.125);
      const std::vector<double> got = ReadFloat(out);
      CHECK(Nmse(got, ref) <= (gemm == "bf16" ? 5e-5 : 1e-10));
      double worst = 0;
      for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::fabs(got[i] - ref[i]));
      CHECK(worst <= (gemm == "bf16" ? 1e-2 : 1e-5));
    }
  }
}
