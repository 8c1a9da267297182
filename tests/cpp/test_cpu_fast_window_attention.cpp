// Gates of sliding windows and sinks in the CPU device's fast paged attention: the decode
// attention (cpp/cpu/fast/attention/decode_attention.cpp) and the prefill attentions
// (cpp/cpu/fast/prefill/*paged_attention*), in the op-case table against the oracle
// (which must not serve: the case's provider does) with the bars of their own tables
// (test_cpu_fast_decode_attention.cpp, test_cpu_fast_attention.cpp). Windows of 1, of a
// block multiple and not, at least the context (full attention), at Gemma 3's head_dim
// 256 and gpt-oss's window with sinks; sinks alone (one above every score). The cache rows
// before a request's first window are NaN and their block-table entries -1, so a read
// of them fails. Each case's window or sinks move the float64 reference by far more than
// the bar (a window at least the context must not), and the fast providers meet that
// reference.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "cpu/fast/simd/cpu_features.h"
#include "cpu/parallel.h"
#include "cpu_bf16_testing.h"
#include "metalrt/op_registry.h"
#include "metalrt/ops.h"
#include "op_cases.h"
#include "paged_attention_testing.h"

using namespace metalrt;
using namespace metalrt::testing;

namespace {

constexpr bool kHaveBlas = std::strcmp(METALRT_BLAS_NAME, "none") != 0;
constexpr const char* kDecode = "cpu_fast_paged_attention";
constexpr const char* kBlas = "cpu_blas_paged_attention";
constexpr const char* kBf16 = "cpu_bf16_paged_attention";
using cpu::fast::PrefillGemm;

struct WindowCase {
  AttentionCase a;
  int64_t window;
  bool sinks;
};

// Decode batches: the decode attention serves them.
const std::vector<WindowCase> kDecodeCases = {
    {{"decode/window1", 9, 3, 64, 16, {{1, 100}, {1, 1}}}, 1, false},
    {{"decode/window32_block_multiple", 9, 3, 64, 16, {{1, 100}, {1, 33}, {1, 20}}}, 32, false},
    {{"decode/window37", 9, 3, 64, 16, {{1, 300}, {1, 2}, {1, 129}, {0, 7}, {1, 48}}}, 37, false},
    {{"decode/window_past_context", 9, 3, 64, 16, {{1, 70}, {1, 300}}}, 300, false},
    {{"decode/gemma3_hd256_window512", 4, 1, 256, 16, {{1, 1500}, {1, 600}}}, 512, false},
    {{"decode/ctx4096_window1000", 8, 2, 128, 16, {{1, 4096}}}, 1000, false},
    {{"decode/block_size5_window13", 6, 3, 64, 5, {{1, 23}, {1, 131}}}, 13, false},
    {{"decode/sinks", 8, 2, 64, 16, {{1, 1}, {1, 70}, {1, 300}}}, 0, true},
    {{"decode/gpt_oss_window128_sinks", 8, 1, 64, 16, {{1, 400}, {1, 60}}}, 128, true},
};

// Batches holding a prefill (more than 16 tokens, so the bf16 products take them too).
const std::vector<WindowCase> kPrefillCases = {
    {{"prefill/window1", 4, 2, 64, 16, {{33, 33}}}, 1, false},
    {{"prefill/window16", 9, 3, 64, 16, {{40, 40}}}, 16, false},
    {{"prefill/chunked_window37_sinks", 9, 3, 64, 16, {{100, 300}, {1, 33}}}, 37, true},
    {{"prefill/window_past_context", 6, 2, 64, 16, {{20, 50}, {1, 10}}}, 64, false},
    {{"prefill/gemma3_hd256_window16", 4, 1, 256, 16, {{150, 150}}}, 16, false},
    {{"prefill/gemma3_window512_long", 4, 1, 256, 16, {{100, 900}}}, 512, false},
    {{"prefill/sinks", 8, 2, 64, 16, {{33, 50}, {0, 5}}}, 0, true},
    {{"prefill/block_size5_window13", 6, 3, 128, 5, {{1, 23}, {30, 48}}}, 13, true},
};

struct Built {
  AttentionGeometry g;
  std::vector<AttentionRequest> reqs;
  AttentionBatch bt;
  ops::OptTensor sinks;
  std::vector<double> sink_values;
  float scale;
};

Built Build(const WindowCase& w, DType dtype, uint32_t seed) {
  Built b{{w.a.heads, w.a.kv_heads, w.a.head_dim, w.a.block_size, 0, 0}, {}, {}, std::nullopt, {}, 0};
  b.reqs = ShuffledRequests(w.a.lens, b.g, seed);
  b.bt = MakeAttentionBatch(b.reqs, b.g, dtype, seed, w.window);
  if (w.sinks) {
    b.sink_values = SinkLogits(w.a.heads);
    b.sinks = MakeFloat({w.a.heads}, DType::kF32, b.sink_values);
  }
  b.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(w.a.head_dim)));
  return b;
}

// provider: kDecode (threads as given) or a prefill one under METALRT_CPU_GEMM.
OpCase MakeCase(const WindowCase& w, DType dtype, uint32_t seed, const std::string& provider, int threads) {
  const Built b = Build(w, dtype, seed);
  OpCase c;
  c.name = std::string("paged_attention/") + DTypeName(dtype) + "/" + w.a.name + "/" + provider + "_t" +
           std::to_string(threads);
  c.op = "paged_attention";
  c.provider = provider;
  c.device = DeviceType::kCPU;
  c.inputs = {b.bt.query, b.bt.key_cache, b.bt.value_cache, b.bt.block_tables, b.bt.seq_lens, b.bt.query_start_loc};
  if (b.sinks) c.inputs.push_back(*b.sinks);
  c.outputs = {{b.bt.query.shape(), dtype}};
  const int64_t window = w.window;
  c.run = [scale = b.scale, threads, window](const Inputs& in, const Outputs& out) {
    const cpu::ScopedParallelThreadLimit limit(threads);
    ops::PagedAttention(in[0], in[1], in[2], in[3], in[4], in[5], scale, out[0], /*coarse_projections=*/true,
                        window, in.size() > 6 ? ops::OptTensor(in[6]) : std::nullopt);
    return Returned{};
  };
  const bool bf16 = provider == kBf16;
  c.nmse = bf16 ? 5e-5 : dtype == DType::kF32 ? 1e-10 : 5e-4;
  c.bar = {dtype == DType::kF32 ? 0.0 : 2 * UnitRoundoff(dtype), bf16 ? 1e-2 : 1e-5};
  if (provider != kDecode) RunUnder(c, "METALRT_CPU_GEMM", cpu::fast::PrefillGemmName(bf16 ? PrefillGemm::kBf16 : PrefillGemm::kF32));
  return c;
}

}  // namespace

METALRT_OP_CASES(cpu_fast_window_attention_cases) {
  std::vector<OpCase> cases;
  uint32_t seed = 3200;
  for (const WindowCase& w : kDecodeCases)
    for (int threads : {1, 2}) cases.push_back(MakeCase(w, DType::kF32, seed += 10, kDecode, threads));
  for (DType dtype : {DType::kF16, DType::kBF16})
    cases.push_back(MakeCase(kDecodeCases[8], dtype, seed += 10, kDecode, 2));
  if (kHaveBlas) {
    for (const WindowCase& w : kPrefillCases) cases.push_back(MakeCase(w, DType::kF32, seed += 10, kBlas, 2));
    cases.push_back(MakeCase(kPrefillCases[2], DType::kBF16, seed += 10, kBlas, 2));
  }
  if (cpu::fast::CpuHasAvx512Bf16())
    for (cpu::fast::Bf16Kernel kernel : Bf16Kernels())
      for (const WindowCase& w : kPrefillCases)
        cases.push_back(OnKernel(MakeCase(w, DType::kF32, seed += 10, kBf16, 2), kernel));
  return cases;
}

TEST_CASE("cpu fast window attention: each window and sink set changes the result, and the fast providers meet the float64 reference") {
  std::vector<std::pair<const WindowCase*, std::string>> runs;
  for (const WindowCase& w : kDecodeCases) runs.push_back({&w, kDecode});
  for (const WindowCase& w : kPrefillCases) {
    if (kHaveBlas) runs.push_back({&w, kBlas});
    if (cpu::fast::CpuHasAvx512Bf16()) runs.push_back({&w, kBf16});
  }
  for (const auto& [w, provider] : runs) {
    CAPTURE(w->a.name);
    CAPTURE(provider);
    const Built b = Build(*w, DType::kF32, 77);
    const std::vector<double> want = AttentionReference(b.bt, b.reqs, b.g, b.scale, w->window, b.sink_values);
    // Full causal attention without sinks, on a batch whose caches hold every position.
    const AttentionBatch whole = MakeAttentionBatch(b.reqs, b.g, DType::kF32, 77);
    const std::vector<double> plain = AttentionReference(whole, b.reqs, b.g, b.scale);
    int64_t widest = 0;
    for (const AttentionRequest& r : b.reqs) widest = std::max<int64_t>(widest, r.seq_len);
    if (w->window >= widest && !w->sinks) CHECK(Nmse(want, plain) < 1e-24);
    else CHECK(Nmse(want, plain) > 1e-4);
    setenv("METALRT_CPU_GEMM", provider == kBf16 ? "bf16" : "f32", 1);
    ResetProviderStats();
    const Tensor out = Poisoned(b.bt.query.shape(), DType::kF32);
    ops::PagedAttention(b.bt.query, b.bt.key_cache, b.bt.value_cache, b.bt.block_tables, b.bt.seq_lens,
                        b.bt.query_start_loc, b.scale, out, true, w->window, b.sinks);
    unsetenv("METALRT_CPU_GEMM");
    CHECK(GetProviderStats("paged_attention", DeviceType::kCPU).last_selected == provider);
    CHECK(Nmse(ReadFloat(out), want) < (provider == kBf16 ? 5e-5 : 1e-10));
  }
}

TEST_CASE("cpu fast window attention: decode bytes are the same on 1, 2, 16 and 64 threads") {
  for (const WindowCase* w : {&kDecodeCases[2], &kDecodeCases[5], &kDecodeCases[8]}) {
    CAPTURE(w->a.name);
    const Built b = Build(*w, DType::kF32, 5);
    std::vector<uint8_t> first;
    for (int threads : {1, 2, 16, 64}) {
      const cpu::ScopedParallelThreadLimit limit(threads);
      const Tensor out = Poisoned(b.bt.query.shape(), DType::kF32);
      ResetProviderStats();
      ops::PagedAttention(b.bt.query, b.bt.key_cache, b.bt.value_cache, b.bt.block_tables, b.bt.seq_lens,
                          b.bt.query_start_loc, b.scale, out, false, w->window, b.sinks);
      CHECK(GetProviderStats("paged_attention", DeviceType::kCPU).last_selected == kDecode);
      if (first.empty()) first = Bytes(out);
      else CHECK(Bytes(out) == first);
    }
  }
}
