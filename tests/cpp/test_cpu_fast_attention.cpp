// Gates of the CPU device's BLAS prefill attention (cpp/cpu/fast/blas/paged_attention.cpp)
// in the op-case table: against the oracle (the provider disabled) at the default
// model's geometry (9 heads, 3 kv heads, head_dim 64) for 128- and 512-token prefills,
// a chunked prefill and a mixed batch, and at boundary shapes (head_dim 1/33/96, query
// blocks of 31/32/33 queries, a request with no query, a GQA group of 10, block sizes
// 1 and 5). Every cache slot a request does not own is NaN, so a read outside a context
// fails. Bars: f32 NMSE <= 1e-10 and every element within 1e-5 (outputs are convex
// combinations of values in [-1, 1]; only the order of the f32 sums differs); f16/bf16
// may round one ulp the other way. Built without a BLAS, no case is registered.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <utility>

#include "metalrt/op_registry.h"
#include "metalrt/ops.h"
#include "op_cases.h"
#include "paged_attention_testing.h"

using namespace metalrt;
using namespace metalrt::testing;

namespace {

constexpr bool kHaveBlas = std::strcmp(METALRT_BLAS_NAME, "none") != 0;
constexpr const char* kProvider = "cpu_blas_paged_attention";

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

OpCase MakeCase(const AttentionCase& a, DType dtype, uint32_t seed) {
  AttentionGeometry g{a.heads, a.kv_heads, a.head_dim, a.block_size, 0, 0};
  const AttentionBatch bt = MakeAttentionBatch(ShuffledRequests(a.lens, g, seed), g, dtype, seed);
  OpCase c;
  c.name = std::string("paged_attention/") + DTypeName(dtype) + "/" + a.name + "/cpu_blas";
  c.op = "paged_attention";
  c.provider = kProvider;
  c.device = DeviceType::kCPU;
  c.inputs = {bt.query, bt.key_cache, bt.value_cache, bt.block_tables, bt.seq_lens, bt.query_start_loc};
  c.outputs = {{bt.query.shape(), dtype}};
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(a.head_dim)));
  c.run = [scale](const Inputs& in, const Outputs& out) {
    ops::PagedAttention(in[0], in[1], in[2], in[3], in[4], in[5], scale, out[0]);
    return Returned{};
  };
  c.nmse = dtype == DType::kF32 ? 1e-10 : 5e-4;
  c.bar = {dtype == DType::kF32 ? 0.0 : 2 * UnitRoundoff(dtype), 1e-5};
  return c;
}

}  // namespace

METALRT_OP_CASES(cpu_fast_attention_cases) {
  std::vector<OpCase> cases;
  if (!kHaveBlas) return cases;
  uint32_t seed = 1400;
  for (const AttentionCase& a : kCases) cases.push_back(MakeCase(a, DType::kF32, seed += 10));
  for (DType dtype : {DType::kF16, DType::kBF16})
    for (const AttentionCase& a : {kCases[2], kCases[6]}) cases.push_back(MakeCase(a, dtype, seed += 10));
  return cases;
}

TEST_CASE("cpu fast attention: decode-only batches are declined, a prefill is served by the BLAS provider") {
  for (const Lens& lens : {Lens{{1, 5}, {1, 40}}, Lens{{9, 30}}}) {
    const bool prefill = lens[0].first > 1;
    CAPTURE(prefill);
    AttentionGeometry g{6, 2, 64, 16, 0, 0};
    const AttentionBatch bt = MakeAttentionBatch(ShuffledRequests(lens, g, 11), g, DType::kF32);
    ResetProviderStats();
    ops::PagedAttention(bt.query, bt.key_cache, bt.value_cache, bt.block_tables, bt.seq_lens,
                        bt.query_start_loc, 0.125f, Poisoned(bt.query.shape(), DType::kF32));
    const ProviderStats stats = GetProviderStats("paged_attention", DeviceType::kCPU);
    CHECK(stats.calls == 1);
    if (kHaveBlas && prefill) CHECK(stats.last_selected == kProvider);
    else CHECK(stats.last_selected != kProvider);
  }
}
