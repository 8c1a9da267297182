// Gates of the CPU device's fast paged attention (cpp/cpu/fast/attention/decode_attention.cpp) in
// the op-case table: against the oracle (the fast providers disabled) for decode
// batches at the default model's geometry (9 heads, 3 kv heads, head_dim 64, blocks of
// 16) with contexts 1, 15/16/17, 31/32/33 and 63/64/65 (cache-block, 16-key score tile
// and 32-key work-chunk boundaries), 128, 1024 and 4096, several requests of different
// lengths, and at boundary shapes (GQA groups of 1, 3 and 8, head_dim 1, 33, 64, 128,
// block sizes 1 and 5), each on 1 and 2 threads. Every cache slot a request does not own is NaN, so a read outside a context
// fails. Bars: f32 NMSE <= 1e-10 and every element within 1e-5 (outputs are convex
// combinations of values in [-1, 1]; the chunked softmax, the order of the f32 sums and
// the FMAs differ from the oracle); f16/bf16 outputs may round the other way.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "cpu/fast/attention/attention_kernels.h"
#include "cpu/fast/simd/cpu_features.h"
#include "cpu_isa_testing.h"
#include "cpu/parallel.h"
#include "metalrt/op_registry.h"
#include "metalrt/ops.h"
#include "op_cases.h"
#include "paged_attention_testing.h"

using namespace metalrt;
using namespace metalrt::testing;

namespace {

constexpr const char* kProvider = "cpu_fast_paged_attention";
// The prefill providers: the bf16 products, and the f32 sgemms of BLAS builds.
constexpr const char* kBf16Provider = "cpu_bf16_paged_attention";
constexpr const char* kBlasProvider = "cpu_blas_paged_attention";
constexpr bool kHaveBlas = std::strcmp(METALRT_BLAS_NAME, "none") != 0;

// Turns the prefill providers the build has off or on.
void SetPrefillProvidersEnabled(bool enabled) {
  SetProviderEnabled(kBf16Provider, enabled);
  if (kHaveBlas) SetProviderEnabled(kBlasProvider, enabled);
}

const std::vector<AttentionCase> kDecodeCases = {
    {"smollm2/ctx1", 9, 3, 64, 16, {{1, 1}}},
    {"smollm2/ctx15_16_17", 9, 3, 64, 16, {{1, 15}, {1, 16}, {1, 17}}},
    {"smollm2/ctx31_32_33", 9, 3, 64, 16, {{1, 31}, {1, 32}, {1, 33}}},
    {"smollm2/ctx63_64_65", 9, 3, 64, 16, {{1, 63}, {1, 64}, {1, 65}}},
    {"smollm2/ctx128", 9, 3, 64, 16, {{1, 128}}},
    {"smollm2/ctx1024", 9, 3, 64, 16, {{1, 1024}}},
    {"smollm2/ctx4096", 9, 3, 64, 16, {{1, 4096}}},
    {"smollm2/batch_of_5", 9, 3, 64, 16, {{1, 300}, {1, 2}, {1, 129}, {0, 7}, {1, 48}}},
    {"gqa1", 4, 4, 64, 16, {{1, 70}, {1, 5}}},
    {"gqa8/head_dim128", 16, 2, 128, 16, {{1, 200}, {1, 33}}},
    {"head_dim1", 2, 1, 1, 16, {{1, 3}, {1, 80}}},
    {"head_dim33", 6, 2, 33, 16, {{1, 33}, {1, 100}}},
    {"block_size1", 6, 3, 64, 1, {{1, 9}, {1, 70}}},
    {"block_size5", 6, 3, 128, 5, {{1, 23}, {1, 131}}},
};

OpCase MakeCase(const AttentionCase& a, DType dtype, int threads, uint32_t seed) {
  AttentionGeometry g{a.heads, a.kv_heads, a.head_dim, a.block_size, 0, 0};
  const AttentionBatch bt = MakeAttentionBatch(ShuffledRequests(a.lens, g, seed), g, dtype, seed);
  OpCase c;
  c.name = std::string("paged_attention/") + DTypeName(dtype) + "/" + a.name + "/cpu_fast_t" + std::to_string(threads);
  c.op = "paged_attention";
  c.provider = kProvider;
  c.device = DeviceType::kCPU;
  c.inputs = {bt.query, bt.key_cache, bt.value_cache, bt.block_tables, bt.seq_lens, bt.query_start_loc};
  c.outputs = {{bt.query.shape(), dtype}};
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(a.head_dim)));
  c.run = [scale, threads](const Inputs& in, const Outputs& out) {
    const cpu::ScopedParallelThreadLimit limit(threads);
    ops::PagedAttention(in[0], in[1], in[2], in[3], in[4], in[5], scale, out[0]);
    return Returned{};
  };
  c.nmse = dtype == DType::kF32 ? 1e-10 : 5e-4;
  c.bar = {dtype == DType::kF32 ? 0.0 : 2 * UnitRoundoff(dtype), 1e-5};
  return c;
}

struct Run {
  std::vector<double> values;
  std::vector<uint8_t> bytes;
  std::string served;
};

// One call on `bt`, the output NaN-poisoned; the provider stats say who served.
Run Attend(const AttentionBatch& bt, float scale) {
  ResetProviderStats();
  const Tensor out = Poisoned(bt.query.shape(), bt.query.dtype());
  ops::PagedAttention(bt.query, bt.key_cache, bt.value_cache, bt.block_tables, bt.seq_lens, bt.query_start_loc,
                      scale, out);
  return {ReadFloat(out), Bytes(out), GetProviderStats("paged_attention", DeviceType::kCPU).last_selected};
}

}  // namespace

METALRT_OP_CASES(cpu_fast_decode_attention_cases) {
  std::vector<OpCase> cases;
  uint32_t seed = 2600;
  for (const AttentionCase& a : kDecodeCases)
    for (int threads : {1, 2}) cases.push_back(MakeCase(a, DType::kF32, threads, seed += 10));
  for (DType dtype : {DType::kF16, DType::kBF16})
    for (const AttentionCase& a : {kDecodeCases[7], kDecodeCases[11]}) cases.push_back(MakeCase(a, dtype, 2, seed += 10));
  return cases;
}

TEST_CASE("cpu fast decode attention: the 2-thread cases run two threads and give the 1-thread bytes") {
  CHECK(cpu::ParallelThreadCount() >= 2);
  for (const AttentionCase& a : {kDecodeCases[4], kDecodeCases[6], kDecodeCases[7]}) {
    CAPTURE(a.name);
    AttentionGeometry g{a.heads, a.kv_heads, a.head_dim, a.block_size, 0, 0};
    const AttentionBatch bt = MakeAttentionBatch(ShuffledRequests(a.lens, g, 5), g, DType::kF32, 5);
    Run one, two;
    {
      const cpu::ScopedParallelThreadLimit limit(1);
      one = Attend(bt, 0.125f);
    }
    two = Attend(bt, 0.125f);
    CHECK(one.served == kProvider);
    CHECK(two.served == kProvider);
    CHECK(one.bytes == two.bytes);
  }
}

TEST_CASE("cpu fast decode attention: prefill and mixed batches without the prefill providers meet the bar") {
  // The prefill providers take batches holding a prefill (the bf16 products where the
  // CPU runs them, the BLAS build's sgemms); without them this provider serves them, so
  // they are gated here with those turned off.
  SetPrefillProvidersEnabled(false);
  for (const Lens& lens : {Lens{{128, 128}}, Lens{{100, 300}, {1, 33}}, Lens{{31, 31}, {0, 5}, {65, 70}}}) {
    AttentionGeometry g{9, 3, 64, 16, 0, 0};
    const std::vector<AttentionRequest> reqs = ShuffledRequests(lens, g, 9);
    const AttentionBatch bt = MakeAttentionBatch(reqs, g, DType::kF32, 9);
    const Run fast = Attend(bt, 0.125f);
    SetProviderEnabled(kProvider, false);
    const Run oracle = Attend(bt, 0.125f);
    SetProviderEnabled(kProvider, true);
    CHECK(fast.served == kProvider);
    CHECK(oracle.served == "cpu_paged_attention");
    CHECK(Nmse(fast.values, oracle.values) < 1e-10);
    double worst = 0;
    for (size_t i = 0; i < fast.values.size(); ++i) worst = std::max(worst, std::abs(fast.values[i] - oracle.values[i]));
    CHECK(worst < 1e-5);
    CHECK(Nmse(fast.values, AttentionReference(bt, reqs, g, 0.125)) < 1e-10);
  }
  SetPrefillProvidersEnabled(true);
}

TEST_CASE("cpu fast decode attention: every kernel this CPU can run meets the bar (METALRT_CPU_ISA)") {
  using cpu::fast::GemvIsa;
  const std::vector<GemvIsa> isas = RunnableIsas();
  for (const AttentionCase& a : {kDecodeCases[7], kDecodeCases[10], kDecodeCases[11], kDecodeCases[13]}) {
    AttentionGeometry g{a.heads, a.kv_heads, a.head_dim, a.block_size, 0, 0};
    const AttentionBatch bt = MakeAttentionBatch(ShuffledRequests(a.lens, g, 3), g, DType::kF32, 3);
    SetProviderEnabled(kProvider, false);
    const Run oracle = Attend(bt, 0.2f);
    SetProviderEnabled(kProvider, true);
    for (GemvIsa isa : isas) {
      const std::string name = cpu::fast::GemvIsaName(isa);
      CAPTURE(a.name);
      CAPTURE(name);
      setenv("METALRT_CPU_ISA", cpu::fast::GemvIsaName(isa), 1);
      cpu::fast::ResetCpuSelections();
      const Run got = Attend(bt, 0.2f);
      unsetenv("METALRT_CPU_ISA");
      cpu::fast::ResetCpuSelections();
      CHECK(got.served == kProvider);
      CHECK(Nmse(got.values, oracle.values) < 1e-10);
    }
  }
}

TEST_CASE("cpu fast decode attention: the softmax's exp is within 2 ulp of expf on every kernel") {
  using cpu::fast::GemvIsa;
  const std::vector<GemvIsa> isas = RunnableIsas();
  for (GemvIsa isa : isas) {
    const std::string name = cpu::fast::GemvIsaName(isa);
    CAPTURE(name);
    setenv("METALRT_CPU_ISA", cpu::fast::GemvIsaName(isa), 1);
    cpu::fast::ResetCpuSelections();
    const cpu::fast::AttentionKernels kernels = cpu::fast::SelectedAttentionKernels();
    unsetenv("METALRT_CPU_ISA");
    cpu::fast::ResetCpuSelections();
    double worst = 0;
    // Chunks of 61 scores over [-100, 0] (and -inf), each led by a 0 so that m = 0 and
    // w_j = exp(s_j); 61 leaves a padded tail.
    for (int chunk = 0; chunk < 2000; ++chunk) {
      float s[64];
      s[0] = 0.0f;
      for (int j = 1; j < 61; ++j) s[j] = -100.0f * static_cast<float>((chunk * 60 + j) % 119993) / 119993.0f;
      if (chunk == 7) s[5] = -INFINITY;
      float in[64];
      std::memcpy(in, s, sizeof(s));
      float l = 0;
      CHECK(kernels.softmax(s, 61, 64, &l) == 0.0f);
      double sum = 0;
      for (int j = 0; j < 61; ++j) {
        const double want = std::exp(static_cast<double>(in[j]));
        sum += want;
        if (in[j] < -87.3f) {
          CHECK(s[j] < 1e-37f);   // 0, or expf's own underflowing value
          continue;
        }
        worst = std::max(worst, std::abs(s[j] - want) / want);
      }
      CHECK(std::abs(l - sum) <= 1e-6 * sum);
    }
    MESSAGE(name << ": exp worst relative error " << worst);
    CHECK(worst < 2.5e-7);   // 2 ulp of 2^-23 (and a little)
  }
}
