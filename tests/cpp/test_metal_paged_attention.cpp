// Gates of the Metal paged attention kernels (metal/paged_attention.metal): op cases
// versus the CPU oracle at the OPT-125m and Qwen3 geometries, pure decode batches and the
// boundary shapes (head_dim 1/31/32/33/128, contexts around the 16-key tile, query tiles
// of 7/8/9, GQA groups wider than a decode threadgroup, odd block sizes); which kernel a
// batch dispatches; f32 versus float64; heads the kernels decline. Every cache slot a
// request does not own is NaN, so a read outside a context fails the comparison.
#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "metal_op_testing.h"
#include "metalrt/ops.h"
#include "op_cases.h"
#include "paged_attention_testing.h"

using namespace metalrt;
using namespace metalrt::testing;

namespace {

const std::vector<AttentionCase> kGeometries = {
    // OPT-125m: MHA, two prefills of different lengths, one on 37 cached positions.
    {"opt125m/two_requests", 12, 12, 64, 16, {{5, 5}, {19, 56}}},
    // Qwen3: GQA 2:1, head_dim 128; 13 queries (a partial 8-query tile) on 40 cached
    // positions crossing block boundaries, beside a decode request.
    {"qwen3/partial_tile_and_decode", 16, 8, 128, 16, {{13, 53}, {1, 77}}},
    // SmolLM2: GQA 3:1; decode, prefill and chunked prefill in one batch.
    {"smollm2/mixed", 9, 3, 64, 16, {{1, 33}, {17, 17}, {5, 40}}},
};

const std::vector<AttentionCase> kDecodeBatches = {
    {"qwen3/decode/B1_ctx1", 16, 8, 128, 16, {{1, 1}}},
    {"qwen3/decode/B1_ctx17", 16, 8, 128, 16, {{1, 17}}},
    {"qwen3/decode/B1_ctx128", 16, 8, 128, 16, {{1, 128}}},
    {"qwen3/decode/B1_ctx300", 16, 8, 128, 16, {{1, 300}}},
    {"qwen3/decode/B4_ctx1_17_128_300", 16, 8, 128, 16, {{1, 1}, {1, 17}, {1, 128}, {1, 300}}},
    {"opt125m/decode/B4_ctx1_17_128_300", 12, 12, 64, 16, {{1, 1}, {1, 17}, {1, 128}, {1, 300}}},
};

// Boundary shapes: SIMD width +-1 and odd head_dims, contexts at the 16-key tile
// (15/16/17, 31/32/33), query tiles of 2 and 7/8/9, a request with no query, a GQA group
// of 10 (two decode threadgroups per kv head, the second partial), block sizes 1 and 5.
const std::vector<AttentionCase> kBoundaries = {
    {"head_dim1", 2, 1, 1, 16, {{1, 3}, {3, 3}}},
    {"head_dim31", 4, 2, 31, 16, {{1, 31}, {9, 33}}},
    {"head_dim32", 4, 2, 32, 16, {{1, 32}, {8, 32}}},
    {"head_dim33", 4, 2, 33, 16, {{1, 33}, {7, 31}}},
    {"head_dim96", 3, 1, 96, 16, {{1, 15}, {2, 16}}},
    {"contexts15_16_17", 4, 4, 64, 16, {{1, 15}, {1, 16}, {1, 17}, {15, 15}, {16, 16}, {17, 17}}},
    {"query_tiles7_8_9_and_empty", 4, 2, 64, 16, {{7, 20}, {0, 5}, {8, 8}, {9, 40}, {2, 2}}},
    {"gqa10", 20, 2, 64, 16, {{1, 21}, {11, 26}}},
    {"block_size1", 4, 2, 64, 1, {{1, 9}, {6, 6}}},
    {"block_size5", 6, 3, 128, 5, {{1, 23}, {10, 18}}},
};

// The kernels' f32 results differ from the oracle's by accumulation order (~1e-6 of
// outputs of magnitude <= 1, which are convex combinations of values in [-1, 1]); f16 and
// bf16 outputs may round to the neighbouring value (one ulp, two unit roundoffs).
Bar OutputBar(DType dtype) { return {dtype == DType::kF32 ? 0.0 : 2 * UnitRoundoff(dtype), 1e-5}; }

float ScaleOf(int64_t head_dim) { return static_cast<float>(1.0 / std::sqrt(static_cast<double>(head_dim))); }

// The kernels a batch dispatches: decode for one-query requests, prefill for longer ones.
std::vector<std::string> KernelsOf(const Lens& lens, DType dtype) {
  bool decode = false, prefill = false;
  for (const auto& [q_len, seq_len] : lens) {
    decode |= q_len == 1;
    prefill |= q_len > 1;
  }
  const std::string suffix = gpu::KernelDTypeSuffix(dtype);
  std::vector<std::string> kernels;
  if (decode) kernels.push_back("paged_attention_decode_" + suffix);
  if (prefill) kernels.push_back("paged_attention_prefill_" + suffix);
  return kernels;
}

OpCase MakeCase(const AttentionCase& a, DType dtype, uint32_t seed) {
  AttentionGeometry g{a.heads, a.kv_heads, a.head_dim, a.block_size, 0, 0};
  const std::vector<AttentionRequest> reqs = ShuffledRequests(a.lens, g, seed);
  const AttentionBatch bt = MakeAttentionBatch(reqs, g, dtype, seed);
  OpCase c;
  c.name = std::string("paged_attention/") + gpu::KernelDTypeSuffix(dtype) + "/" + a.name;
  c.op = "paged_attention";
  c.provider = "metal_paged_attention";
  c.kernels = KernelsOf(a.lens, dtype);
  c.inputs = {bt.query, bt.key_cache, bt.value_cache, bt.block_tables, bt.seq_lens, bt.query_start_loc};
  c.outputs = {{bt.query.shape(), dtype}};
  const float scale = ScaleOf(a.head_dim);
  c.run = [scale](const Inputs& in, const Outputs& out) {
    ops::PagedAttention(in[0], in[1], in[2], in[3], in[4], in[5], scale, out[0]);
    return Returned{};
  };
  c.bar = OutputBar(dtype);
  return c;
}

}  // namespace

METALRT_OP_CASES(paged_attention_cases) {
  std::vector<OpCase> cases;
  uint32_t seed = 700;
  for (DType dtype : kFloatDTypes)
    for (const AttentionCase& a : kGeometries) cases.push_back(MakeCase(a, dtype, seed += 10));
  for (const AttentionCase& a : kDecodeBatches) cases.push_back(MakeCase(a, DType::kBF16, seed += 10));
  for (const AttentionCase& a : kBoundaries)
    for (DType dtype : {DType::kF32, DType::kF16}) cases.push_back(MakeCase(a, dtype, seed += 10));
  return cases;
}

TEST_CASE("metal paged_attention: decode batches dispatch only the decode kernel, prefill batches the prefill kernel") {
  const Lens decode = {{1, 5}, {1, 40}}, prefill = {{4, 4}, {9, 30}}, mixed = {{1, 5}, {9, 30}};
  for (DType dtype : kFloatDTypes)
    for (const Lens* lens : {&decode, &prefill, &mixed}) {
      CAPTURE(std::string(DTypeName(dtype)));
      CAPTURE(lens->size());
      AttentionGeometry g{6, 2, 64, 16, 0, 0};
      const AttentionBatch bt = MakeAttentionBatch(ShuffledRequests(*lens, g, 11), g, dtype);
      const Tensor q = ToMetal(bt.query), kc = ToMetal(bt.key_cache), vc = ToMetal(bt.value_cache);
      const Tensor tables = ToMetal(bt.block_tables), seq_lens = ToMetal(bt.seq_lens),
                   starts = ToMetal(bt.query_start_loc);
      ResetProviderStats();
      const auto rows = ProfiledRows([&] {
        ops::PagedAttention(q, kc, vc, tables, seq_lens, starts, 0.125f, PoisonedMetal(q.shape(), dtype));
      });
      const std::string suffix = gpu::KernelDTypeSuffix(dtype);
      const bool has_decode = lens != &prefill, has_prefill = lens != &decode;
      CHECK(Dispatches(rows, "paged_attention_decode_" + suffix) == (has_decode ? 1u : 0u));
      CHECK(Dispatches(rows, "paged_attention_prefill_" + suffix) == (has_prefill ? 1u : 0u));
      CheckNativeProvider("paged_attention", "metal_paged_attention", 1);
    }
}

TEST_CASE("metal paged_attention: f32 versus float64 (NMSE <= 1e-10, worst <= 1e-5)") {
  // The Qwen3 geometry with decode, prefill and chunked prefill requests; contexts to 300.
  AttentionGeometry g{16, 8, 128, 16, 0, 0};
  const Lens lens = {{1, 300}, {13, 53}, {21, 21}, {1, 17}};
  const std::vector<AttentionRequest> reqs = ShuffledRequests(lens, g, 5);
  const AttentionBatch bt = MakeAttentionBatch(reqs, g, DType::kF32, 900);
  const double scale = 1.0 / std::sqrt(128.0);
  const Tensor out = PoisonedMetal(bt.query.shape(), DType::kF32);
  ops::PagedAttention(ToMetal(bt.query), ToMetal(bt.key_cache), ToMetal(bt.value_cache),
                      ToMetal(bt.block_tables), ToMetal(bt.seq_lens), ToMetal(bt.query_start_loc),
                      static_cast<float>(scale), out);
  const std::vector<double> got = ReadMetal(out);
  const std::vector<double> ref = AttentionReference(bt, reqs, g, scale);
  CHECK(Nmse(got, ref) <= 1e-10);
  CheckClose(got, ref, {0.0, 1e-5}, "paged_attention f32 vs float64");
}

TEST_CASE("metal paged_attention: head_dim above 128 is declined to the reference tier") {
  // 160 features per head: the kernels' per-lane registers hold 128; the provider
  // declines and the CPU reference tier computes it (counted), with the same result.
  AttentionGeometry g{2, 1, 160, 16, 0, 0};
  const Lens lens = {{1, 9}, {3, 3}};
  const AttentionBatch bt = MakeAttentionBatch(ShuffledRequests(lens, g, 3), g, DType::kF32);
  const Tensor ref = ops::PagedAttention(bt.query, bt.key_cache, bt.value_cache, bt.block_tables,
                                         bt.seq_lens, bt.query_start_loc, 0.1f);
  ResetProviderStats();
  const Tensor out = PoisonedMetal(bt.query.shape(), DType::kF32);
  ops::PagedAttention(ToMetal(bt.query), ToMetal(bt.key_cache), ToMetal(bt.value_cache),
                      ToMetal(bt.block_tables), ToMetal(bt.seq_lens), ToMetal(bt.query_start_loc), 0.1f, out);
  const ProviderStats stats = GetProviderStats("paged_attention", DeviceType::kMETAL);
  CHECK(stats.declines == 1);
  CHECK(stats.reference_hits == 1);
  CHECK(ReadMetal(out) == ReadFloat(ref));
}
