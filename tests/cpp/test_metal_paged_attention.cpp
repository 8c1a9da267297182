// Gates of the Metal paged attention kernels (metal/paged_attention.metal,
// metal/paged_attention_decode.metal): op cases versus the CPU oracle at the OPT-125m,
// Qwen3 and SmolLM2 geometries, pure decode batches, the split-KV decode (contexts 128,
// 1,024 and 4,096, every split count from 1 to 16, contexts around one partition, splits
// ending mid-block, requests of different lengths, GQA ratios 1, 3 and 8) and the
// boundary shapes (head_dim 1/31/32/33/128, contexts around the 16-key tile, query tiles
// of 7/8/9, GQA groups wider than a decode threadgroup, odd block sizes); which kernel a
// batch dispatches; the prefill kernel's GQA-shared grid at GQA 1/3/8/16/40, head_dim 64
// and 128, mid-tile and mid-block ends, chunked prefill and m up to 300 (and in every
// fiber order); f32 versus float64; heads the kernels decline; sliding windows and sinks
// (decode single pass and split-KV, prefill; a decode at context 4,096 with window 1,024
// runs only the window's partitions). Every cache slot a request does not own is NaN, so
// a read outside a context fails the comparison.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "metal_op_testing.h"
#include "metalrt/ops.h"
#include "op_cases.h"
#include "paged_attention_args.h"
#include "paged_attention_testing.h"
#include "sim_testing.h"

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

// Split-KV decode: partitions of kDecodePartition (512) positions. Contexts 128, 1,024 and
// 4,096 (1, 2 and 8 partitions) at GQA 3 (SmolLM2), 1 (OPT) and 8; contexts 511/512/513
// around one partition; block sizes 5 and 48, which do not divide 512, so partitions end
// mid-block; a batch whose requests need 1, 2, 5 and 16 partitions (the grid is sized by
// the longest; shorter requests' extra threadgroups return at once).
const std::vector<AttentionCase> kSplitDecode = {
    {"smollm2/decode/ctx128", 9, 3, 64, 16, {{1, 128}}},
    {"smollm2/decode/ctx1024", 9, 3, 64, 16, {{1, 1024}}},
    {"smollm2/decode/ctx4096", 9, 3, 64, 16, {{1, 4096}}},
    {"gqa1/decode/ctx1024", 4, 4, 64, 16, {{1, 1024}}},
    {"gqa8/decode/ctx4096", 16, 2, 128, 16, {{1, 4096}}},
    {"gqa8/decode/ctx511_512_513", 8, 1, 64, 16, {{1, 511}, {1, 512}, {1, 513}}},
    {"block_size5/decode/ctx600_1001", 6, 2, 64, 5, {{1, 600}, {1, 1001}}},
    {"block_size48/decode/ctx700", 9, 3, 64, 48, {{1, 700}}},
    {"smollm2/decode/B4_ctx3_300_1100_4000", 9, 3, 64, 16, {{1, 3}, {1, 300}, {1, 1100}, {1, 4000}}},
    {"smollm2/mixed_split", 9, 3, 64, 16, {{1, 900}, {17, 17}, {5, 300}}},
};

// Prefill (metal/paged_attention.metal): a threadgroup per (query tile, kv head) holds
// 32 rows of (position, query head) of the GQA group, so a tile has 32 / group
// positions: 32 at GQA 1, 10 at GQA 3, 4 at GQA 8, 2 at GQA 16, 1 at GQA 40 (two
// threadgroups per kv head, 32 and 8 heads). GQA 1, 3 and 8 at head_dim 64 and 128:
// query counts ending mid-tile (45 = 32 + 13, 11 = 10 + 1, 23, 9 = 2 x 4 + 1), contexts
// ending mid-block (block sizes 16 and 5), chunked prefill on a cached prefix,
// one-query requests in the same batch (the decode kernel serves them), mixed lengths,
// and m large (256 and 300 queries, kPrefillLong).
const std::vector<AttentionCase> kPrefill = {
    {"gqa1/d64/mid_tile_and_prefix", 4, 4, 64, 16, {{45, 45}, {33, 70}, {1, 12}}},
    {"gqa1/d128/tile_edges", 2, 2, 128, 16, {{31, 31}, {32, 35}, {2, 19}}},
    {"gqa3/d64/chunked_mixed", 9, 3, 64, 16, {{11, 11}, {1, 30}, {23, 57}, {10, 10}}},
    {"gqa3/d128/block_size5", 6, 2, 128, 5, {{21, 44}, {9, 9}, {2, 3}}},
    {"gqa8/d64/mixed", 16, 2, 64, 16, {{5, 5}, {9, 50}, {1, 12}, {4, 21}}},
    {"gqa8/d128/prefix", 8, 1, 128, 16, {{13, 29}, {4, 4}}},
    {"gqa16/d64", 16, 1, 64, 16, {{5, 21}, {2, 2}}},
    {"gqa40/d64/two_chunks", 40, 1, 64, 16, {{3, 19}, {2, 2}}},
    // head_dim 256 (8-position key tiles), GQA 8 and Gemma 3 1B's GQA 4 (4 q / 1 kv).
    {"gqa8/d256/prefix_and_decode", 16, 2, 256, 16, {{13, 40}, {1, 30}, {9, 9}}},
    {"gqa4/d256/block_size5", 4, 1, 256, 5, {{17, 23}, {2, 2}}},
};
// m large, one dtype each (the sim's cost grows with m x context).
const std::vector<std::pair<AttentionCase, DType>> kPrefillLong = {
    {{"gqa3/d64/m300", 9, 3, 64, 16, {{300, 300}}}, DType::kF16},
    {{"gqa8/d128/m256_on_prefix44", 16, 2, 128, 16, {{256, 300}}}, DType::kBF16},
};

const std::vector<AttentionCase> kDecodeBatches = {
    {"qwen3/decode/B1_ctx1", 16, 8, 128, 16, {{1, 1}}},
    {"qwen3/decode/B1_ctx17", 16, 8, 128, 16, {{1, 17}}},
    {"qwen3/decode/B1_ctx128", 16, 8, 128, 16, {{1, 128}}},
    {"qwen3/decode/B1_ctx300", 16, 8, 128, 16, {{1, 300}}},
    {"qwen3/decode/B4_ctx1_17_128_300", 16, 8, 128, 16, {{1, 1}, {1, 17}, {1, 128}, {1, 300}}},
    // Qwen3-Next / Qwen3.5 full attention (and Gemma 3's head_dim): GQA 8, head_dim 256.
    {"qwen3next/decode/B3_ctx1_200_600", 16, 2, 256, 16, {{1, 1}, {1, 200}, {1, 600}}},
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

// Sliding windows and sinks (gpt-oss's per-head logit): the rows before a request's
// first window are NaN and their whole blocks -1 in the table. Windows 1, 32, 37 and 513
// (not multiples of the block size), past every context (64: only the sinks act), 600 and
// 513 over split-KV decodes (2 partitions of the window, not 2 or 3 of the context), 512 in
// one partition of a context of 1,100, prefill
// tiles across the window's edge, head_dim 256 at Gemma 3 1B's GQA 4, a GQA group of 40.
struct WindowedCase {
  AttentionCase a;
  int64_t window;
  bool sinks;
};
const std::vector<WindowedCase> kWindowed = {
    {{"window32/decode", 4, 2, 64, 16, {{1, 100}, {1, 20}}}, 32, false},
    {{"window1/mixed", 4, 2, 64, 16, {{1, 50}, {12, 12}, {5, 30}}}, 1, false},
    {{"window64_past_contexts/sinks", 8, 2, 64, 16, {{1, 40}, {9, 9}}}, 64, true},
    {{"window37/prefill_tiles", 4, 2, 64, 16, {{45, 80}, {1, 80}}}, 37, true},
    {{"window600/decode_split", 4, 2, 64, 16, {{1, 1000}, {1, 700}}}, 600, false},
    {{"window513/block_size5/split_sinks", 8, 2, 64, 5, {{1, 900}, {3, 530}}}, 513, true},
    {{"gemma3_1b/window512/decode_and_prefill_sinks", 4, 1, 256, 16, {{1, 1100}, {21, 60}}}, 512, true},
    {{"gemma3_1b/window16/prefill", 4, 1, 256, 16, {{21, 60}, {1, 600}}}, 16, false},
    {{"sinks/decode_split", 9, 3, 64, 16, {{1, 600}, {1, 1}}}, 0, true},
    {{"d256/sinks/decode_split", 4, 1, 256, 16, {{1, 1100}, {1, 5}}}, 0, true},
    {{"gqa40/window8/sinks", 40, 1, 64, 16, {{3, 19}, {2, 2}}}, 8, true},
};

// SinkLogits as the op's float32 [heads] tensor (on the CPU).
Tensor SinksTensor(int64_t heads) { return MakeFloat({heads}, DType::kF32, SinkLogits(heads)); }

// The kernels' f32 results differ from the oracle's by accumulation order (~1e-6 of
// outputs of magnitude <= 1, which are convex combinations of values in [-1, 1]); f16 and
// bf16 outputs may round to the neighbouring value (one ulp, two unit roundoffs).
Bar OutputBar(DType dtype) { return {dtype == DType::kF32 ? 0.0 : 2 * UnitRoundoff(dtype), 1e-5}; }

float ScaleOf(int64_t head_dim) { return static_cast<float>(1.0 / std::sqrt(static_cast<double>(head_dim))); }

// The kernels a batch dispatches: for one-query requests the single-pass decode kernel
// when every such context fits one partition, else the split and merge kernels; prefill
// for longer ones.
// (A window's decode sees only its last `window` positions.)
std::vector<std::string> KernelsOf(const Lens& lens, DType dtype, int32_t window = 0) {
  int32_t partitions = 0;
  bool prefill = false;
  for (const auto& [q_len, seq_len] : lens) {
    if (q_len == 1) partitions = std::max(partitions, DecodePartitions(seq_len, window));
    prefill |= q_len > 1;
  }
  const std::string suffix = gpu::KernelDTypeSuffix(dtype);
  std::vector<std::string> kernels;
  if (partitions > 1) {
    kernels.push_back("paged_attention_decode_split_" + suffix);
    kernels.push_back("paged_attention_decode_merge_" + suffix);
  } else if (partitions > 0) {
    kernels.push_back("paged_attention_decode_" + suffix);
  }
  if (prefill) kernels.push_back("paged_attention_prefill_" + suffix);
  return kernels;
}

// The batch attended on the Metal device into a NaN-poisoned output of its dtype (with a
// window, and SinkLogits(heads) when `sinks`).
Tensor AttendOnMetal(const AttentionBatch& bt, float scale, int64_t window = 0, bool sinks = false) {
  const Tensor out = PoisonedMetal(bt.query.shape(), bt.query.dtype());
  ops::PagedAttention(ToMetal(bt.query), ToMetal(bt.key_cache), ToMetal(bt.value_cache),
                      ToMetal(bt.block_tables), ToMetal(bt.seq_lens), ToMetal(bt.query_start_loc),
                      scale, out, false, window,
                      sinks ? ops::OptTensor(ToMetal(SinksTensor(bt.query.dim(1)))) : std::nullopt);
  return out;
}

// The bar against the float64 attention: NMSE <= 5e-4, every element within
// OutputBar.
void CheckAgainstReference(const std::vector<double>& got, const AttentionBatch& bt,
                           const std::vector<AttentionRequest>& reqs, const AttentionGeometry& g,
                           double scale, const char* what, int64_t window = 0, bool sinks = false) {
  const std::vector<double> ref =
      AttentionReference(bt, reqs, g, scale, window, sinks ? SinkLogits(g.heads) : std::vector<double>{});
  CHECK(Nmse(got, ref) <= 5e-4);
  CheckClose(got, ref, OutputBar(bt.query.dtype()), what);
}

OpCase MakeCase(const AttentionCase& a, DType dtype, uint32_t seed, int64_t window = 0, bool sinks = false) {
  AttentionGeometry g{a.heads, a.kv_heads, a.head_dim, a.block_size, 0, 0};
  const std::vector<AttentionRequest> reqs = ShuffledRequests(a.lens, g, seed);
  const AttentionBatch bt = MakeAttentionBatch(reqs, g, dtype, seed, window);
  OpCase c;
  c.name = std::string("paged_attention/") + gpu::KernelDTypeSuffix(dtype) + "/" + a.name;
  c.op = "paged_attention";
  c.provider = "metal_paged_attention";
  c.kernels = KernelsOf(a.lens, dtype, static_cast<int32_t>(window));
  c.inputs = {bt.query, bt.key_cache, bt.value_cache, bt.block_tables, bt.seq_lens, bt.query_start_loc};
  if (sinks) c.inputs.push_back(SinksTensor(a.heads));
  c.outputs = {{bt.query.shape(), dtype}};
  const float scale = ScaleOf(a.head_dim);
  c.run = [scale, window](const Inputs& in, const Outputs& out) {
    ops::PagedAttention(in[0], in[1], in[2], in[3], in[4], in[5], scale, out[0], false, window,
                        in.size() > 6 ? ops::OptTensor(in[6]) : std::nullopt);
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
  for (const AttentionCase& a : kSplitDecode)
    for (DType dtype : {DType::kF32, DType::kF16}) cases.push_back(MakeCase(a, dtype, seed += 10));
  for (const AttentionCase& a : kPrefill)
    for (DType dtype : kFloatDTypes) cases.push_back(MakeCase(a, dtype, seed += 10));
  for (const auto& [a, dtype] : kPrefillLong) cases.push_back(MakeCase(a, dtype, seed += 10));
  for (const AttentionCase& a : kBoundaries)
    for (DType dtype : {DType::kF32, DType::kF16}) cases.push_back(MakeCase(a, dtype, seed += 10));
  for (const WindowedCase& w : kWindowed)
    for (DType dtype : kFloatDTypes) cases.push_back(MakeCase(w.a, dtype, seed += 10, w.window, w.sinks));
  return cases;
}

TEST_CASE("metal paged_attention: windows and sinks match float64, change the result, and run natively") {
  for (const WindowedCase& w : kWindowed) {
    CAPTURE(w.a.name);
    AttentionGeometry g{w.a.heads, w.a.kv_heads, w.a.head_dim, w.a.block_size, 0, 0};
    const std::vector<AttentionRequest> reqs = ShuffledRequests(w.a.lens, g, 19);
    const AttentionBatch bt = MakeAttentionBatch(reqs, g, DType::kF32, 29, w.window);
    const std::vector<double> sinks = w.sinks ? SinkLogits(w.a.heads) : std::vector<double>{};
    const double scale = ScaleOf(w.a.head_dim);
    ResetProviderStats();
    const Tensor out = AttendOnMetal(bt, static_cast<float>(scale), w.window, w.sinks);
    CheckNativeProvider("paged_attention", "metal_paged_attention", 1);
    const std::vector<double> got = ReadMetal(out);
    const std::vector<double> ref = AttentionReference(bt, reqs, g, scale, w.window, sinks);
    CHECK(Nmse(got, ref) <= 1e-10);
    CheckClose(got, ref, {0.0, 1e-5}, "windowed paged_attention f32 vs float64");
    // The same values attended in full, without sinks (a batch owning every position).
    const AttentionBatch full = MakeAttentionBatch(reqs, g, DType::kF32, 29);
    const std::vector<double> plain = AttentionReference(full, reqs, g, scale);
    double moved = 0;
    for (size_t i = 0; i < ref.size(); ++i) moved = std::max(moved, std::abs(ref[i] - plain[i]));
    CHECK(moved > 1e-2);
  }
}

TEST_CASE("metal paged_attention: a decode at context 4,096 with window 1,024 reads only the window's 2 partitions (profiler)") {
  // SmolLM2's geometry (9 heads, 3 kv heads, head_dim 64), f16. Each split threadgroup
  // reads one partition of <= 512 positions for one query head: window 1,024 gives 9 x 2
  // threadgroups (1,024 positions), full attention 9 x 8 (4,096 positions). The 3,072
  // rows before the window are NaN and their 192 table entries -1, so a read of any of
  // them fails.
  struct Expect {
    int64_t window;
    uint32_t partitions;
  };
  for (const Expect& e : {Expect{1024, 2}, Expect{0, 8}}) {
    CAPTURE(e.window);
    AttentionGeometry g{9, 3, 64, 16, 0, 0};
    const Lens lens = {{1, 4096}};
    const std::vector<AttentionRequest> reqs = ShuffledRequests(lens, g, 3);
    const AttentionBatch bt = MakeAttentionBatch(reqs, g, DType::kF16, 17, e.window);
    Tensor out;
    const auto rows = ProfiledRows([&] { out = AttendOnMetal(bt, 0.125f, e.window); });
    const ProfileRow* split = nullptr;
    for (const ProfileRow& row : rows)
      if (row.name == "paged_attention_decode_split_f16") split = &row;
    REQUIRE(split != nullptr);
    CHECK(split->threadgroups == 9 * e.partitions);
    CHECK(split->last_grid[2] == e.partitions);
    CHECK(Dispatches(rows, "paged_attention_decode_merge_f16") == 1);
    CheckAgainstReference(ReadMetal(out), bt, reqs, g, 0.125, "windowed split-KV decode vs float64", e.window);
  }
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

TEST_CASE("metal paged_attention: head_dim above 256 is declined to the reference tier") {
  // 264 features per head: the kernels' per-lane registers hold 256; the provider
  // declines and the CPU reference tier computes it (counted), with the same result.
  AttentionGeometry g{2, 1, 264, 16, 0, 0};
  const Lens lens = {{1, 9}, {3, 3}};
  const AttentionBatch bt = MakeAttentionBatch(ShuffledRequests(lens, g, 3), g, DType::kF32);
  const Tensor ref = ops::PagedAttention(bt.query, bt.key_cache, bt.value_cache, bt.block_tables,
                                         bt.seq_lens, bt.query_start_loc, 0.1f);
  ResetProviderStats();
  const Tensor out = PoisonedMetal(bt.query.shape(), DType::kF32);
  ops::PagedAttention(ToMetal(bt.query), ToMetal(bt.key_cache), ToMetal(bt.value_cache),
                      ToMetal(bt.block_tables), ToMetal(bt.seq_lens), ToMetal(bt.query_start_loc), 0.1f, out);
  const ProviderStats stats = GetProviderStats("paged_attention", DeviceType::kMETAL);
  // The Metal provider's decline, and the CPU tier's bf16 products, tried first there,
  // declining a call that does not allow them.
  CHECK(stats.declines == 2u);
  CHECK(stats.reference_hits == 1);
  CHECK(ReadMetal(out) == ReadFloat(ref));
}

TEST_CASE("metal paged_attention: split-KV decode grids at contexts 128, 512, 1,024 and 4,096 (profiler)") {
  // SmolLM2's geometry (9 heads, 3 kv heads), one request. The profiler's threadgroup
  // counts give threadgroups per (request, query head): 1 (single pass, no merge), 2 and
  // 8 (split, then one merge threadgroup per (request, head)); each threadgroup is 32
  // SIMD-groups sharing one partition of <= 512 positions (<= 16 positions each), and the
  // busiest SIMD-group's collectives, counted by the simulated device, are its positions'
  // simd_sums plus the combination's simd_max, simd_sum and 2 feature simd_sums.
  struct Expect {
    int32_t context;
    uint32_t per_head;
  };
  for (const Expect& e : {Expect{128, 1}, Expect{512, 1}, Expect{1024, 2}, Expect{4096, 8}}) {
    CAPTURE(e.context);
    AttentionGeometry g{9, 3, 64, 16, 0, 0};
    const Lens lens = {{1, e.context}};
    const std::vector<AttentionRequest> reqs = ShuffledRequests(lens, g, 3);
    const AttentionBatch bt = MakeAttentionBatch(reqs, g, DType::kF16, 17);
    Tensor out;
    const auto rows = ProfiledRows([&] { out = AttendOnMetal(bt, 0.125f); });
    const bool split = e.per_head > 1;
    const std::string first = split ? "paged_attention_decode_split_f16" : "paged_attention_decode_f16";
    const ProfileRow* attend = nullptr;
    const ProfileRow* merge = nullptr;
    for (const ProfileRow& row : rows) {
      if (row.name == first) attend = &row;
      if (row.name == "paged_attention_decode_merge_f16") merge = &row;
    }
    REQUIRE(attend != nullptr);
    CHECK(attend->dispatches == 1);
    CHECK(attend->threadgroups == 9 * e.per_head);
    CHECK(attend->last_grid[2] == e.per_head);
    CHECK(attend->simdgroups == 9 * e.per_head * 32);
    const uint32_t positions = (std::min(e.context, 512) + 31) / 32;
    if (gpu::ActiveMetalBackend().device().is_simulated())
      CHECK(attend->max_simd_collectives == positions + 4);
    if (split) {
      REQUIRE(merge != nullptr);
      CHECK(merge->dispatches == 1);
      CHECK(merge->threadgroups == 9);
    } else {
      CHECK(merge == nullptr);
    }
    CheckAgainstReference(ReadMetal(out), bt, reqs, g, 0.125, "split-KV decode vs float64");
  }
}

TEST_CASE("metal paged_attention: the split-KV scratch allocates nothing after warm-up") {
  // The partials are a fresh tensor of a repeat size each call: the buffer cache serves
  // it, so a second call at the same context creates no device buffer.
  AttentionGeometry g{9, 3, 64, 16, 0, 0};
  const Lens lens = {{1, 1000}};
  const AttentionBatch bt = MakeAttentionBatch(ShuffledRequests(lens, g, 5), g, DType::kF32, 23);
  const Tensor q = ToMetal(bt.query), kc = ToMetal(bt.key_cache), vc = ToMetal(bt.value_cache);
  const Tensor tables = ToMetal(bt.block_tables), seq_lens = ToMetal(bt.seq_lens),
               starts = ToMetal(bt.query_start_loc);
  const Tensor out = PoisonedMetal(bt.query.shape(), DType::kF32);
  ops::PagedAttention(q, kc, vc, tables, seq_lens, starts, 0.125f, out);   // warm-up
  gpu::ActiveMetalBackend().Synchronize();
  const auto rows = ProfiledRows([&] { ops::PagedAttention(q, kc, vc, tables, seq_lens, starts, 0.125f, out); });
  CHECK(Dispatches(rows, "paged_attention_decode_split_f32") == 1);
  CHECK(rows.back().name == "total");
  CHECK(rows.back().allocated_bytes == 0);
  CHECK(rows.back().allocations == 0);
}

TEST_CASE("metal paged_attention: prefill runs one threadgroup per (query tile, kv head, request), the GQA group sharing each K/V tile (profiler)") {
  // Query heads per kv head -> positions per query tile (32 rows of (position, head))
  // and threadgroups per (tile, kv head): a group wider than 32 heads takes two.
  struct Expect {
    int64_t heads, kv_heads;
    int32_t query_tile;
    uint32_t chunks;
  };
  // 45 queries on a 15-position prefix, 7 queries, and a decode request (not prefill's).
  const Lens lens = {{45, 60}, {1, 9}, {7, 7}};
  for (const Expect& e : {Expect{4, 4, 32, 1}, Expect{9, 3, 10, 1}, Expect{16, 2, 4, 1}, Expect{40, 1, 1, 2}}) {
    CAPTURE(e.heads);
    CAPTURE(e.kv_heads);
    AttentionGeometry g{e.heads, e.kv_heads, 64, 16, 0, 0};
    const std::vector<AttentionRequest> reqs = ShuffledRequests(lens, g, 9);
    const AttentionBatch bt = MakeAttentionBatch(reqs, g, DType::kF16, 31);
    Tensor out;
    const auto rows = ProfiledRows([&] { out = AttendOnMetal(bt, 0.125f); });
    const uint32_t tiles = static_cast<uint32_t>((45 + e.query_tile - 1) / e.query_tile + (7 + e.query_tile - 1) / e.query_tile);
    const ProfileRow* prefill = nullptr;
    for (const ProfileRow& row : rows)
      if (row.name == "paged_attention_prefill_f16") prefill = &row;
    REQUIRE(prefill != nullptr);
    CHECK(prefill->dispatches == 1);
    CHECK(prefill->last_grid[0] == tiles);
    CHECK(prefill->last_grid[1] == e.kv_heads * e.chunks);
    CHECK(prefill->threadgroups == tiles * e.kv_heads * e.chunks);
    CHECK(Dispatches(rows, "paged_attention_decode_f16") == 1);
    CheckAgainstReference(ReadMetal(out), bt, reqs, g, 0.125, "prefill vs float64");
  }
}

TEST_CASE("metal paged_attention: the prefill kernel gives the same bytes in every fiber order") {
  // A missing barrier between staging, the SIMD-group matrix stores and the softmax
  // lanes' reads, or a lane-order assumption, changes the result between orders; in full
  // and with window 7 and sinks (the sinks' normalisation shuffled from the row owners).
  AttentionGeometry g{9, 3, 64, 5, 0, 0};
  const Lens lens = {{23, 41}, {11, 11}};
  const std::vector<AttentionRequest> reqs = ShuffledRequests(lens, g, 13);
  for (int64_t window : {0, 7}) {
    CAPTURE(window);
    const AttentionBatch bt = MakeAttentionBatch(reqs, g, DType::kF32, 77, window);
    std::vector<std::vector<double>> results;
    for (const std::string& order : SimOrders()) {
      CAPTURE(order);
      const ScopedFiberOrder scoped(order);
      results.push_back(ReadMetal(AttendOnMetal(bt, 0.125f, window, window > 0)));
      CheckAgainstReference(results.back(), bt, reqs, g, 0.125, "prefill vs float64", window, window > 0);
    }
    for (const std::vector<double>& r : results) CHECK(r == results.front());
  }
}
