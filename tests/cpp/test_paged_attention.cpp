#include <doctest/doctest.h>

#include "metalrt/errors.h"
#include "metalrt/ops.h"
#include "op_testing.h"
#include "paged_attention_testing.h"

using namespace metalrt;
using namespace metalrt::testing;

namespace {

constexpr int64_t kBlockSize = 16, kNumBlocks = 12, kMaxBlocks = 4;

using Request = AttentionRequest;

AttentionGeometry Geometry(int64_t heads, int64_t kv_heads, int64_t head_dim) {
  return {heads, kv_heads, head_dim, kBlockSize, kNumBlocks, kMaxBlocks};
}

void CheckAgainstReference(const std::vector<Request>& reqs, int64_t heads, int64_t kv_heads,
                           int64_t head_dim, DType dtype) {
  const AttentionGeometry g = Geometry(heads, kv_heads, head_dim);
  const AttentionBatch bt = MakeAttentionBatch(reqs, g, dtype);
  const double scale = 1.0 / std::sqrt(static_cast<double>(head_dim));
  Tensor out = Tensor::Empty(bt.query.shape(), dtype, DeviceType::kCPU);
  Poison(out);
  ops::PagedAttention(bt.query, bt.key_cache, bt.value_cache, bt.block_tables, bt.seq_lens,
                      bt.query_start_loc, static_cast<float>(scale), out);
  const std::vector<double> got = ReadFloat(out);
  const std::vector<double> ref = AttentionReference(bt, reqs, g, scale);
  // f32 internals keep ~1e-6 absolute error on outputs of magnitude <= 1; the output
  // dtype adds its rounding.
  const double u = UnitRoundoff(dtype);
  int bad = 0;
  for (size_t i = 0; i < ref.size(); ++i)
    if (!(std::abs(got[i] - ref[i]) <= u * std::abs(ref[i]) + 2e-6)) ++bad;
  CHECK(bad == 0);
  CHECK(Nmse(got, ref) <= (dtype == DType::kF32 ? 1e-10 : 4 * u * u));
}

// Decode with prior context, a prefill, and a chunked prefill with prior context in one
// batch; block tables out of order and crossing block boundaries.
const std::vector<Request> kMixedBatch = {
    {1, 33, {7, 2, 9}},          // decode at position 32 (first query of block 3)
    {17, 17, {4, 0}},            // prefill from scratch, 17 queries (one past a block)
    {5, 40, {11, 3, 6}},         // chunked prefill: 35 cached, 5 new
};

}  // namespace

TEST_CASE("paged_attention: mixed decode + prefill batch, GQA 3:1, head_dim 64 (SmolLM2)") {
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
    CAPTURE(DTypeName(dtype));
    CheckAgainstReference(kMixedBatch, 9, 3, 64, dtype);
  }
}

TEST_CASE("paged_attention: GQA 2:1, head_dim 128 (Qwen3), boundary lengths") {
  CheckAgainstReference(kMixedBatch, 16, 8, 128, DType::kF32);
  CheckAgainstReference(kMixedBatch, 4, 2, 128, DType::kBF16);
  // Context lengths at a block boundary and one query; an empty request in the middle.
  CheckAgainstReference({{1, 1, {5}}, {0, 0, {}}, {32, 32, {1, 8}}, {2, 64, {10, 0, 3, 2}}},
                        4, 2, 128, DType::kF32);
}

TEST_CASE("paged_attention: MHA (kv_heads = heads), one head, odd head_dim") {
  CheckAgainstReference(kMixedBatch, 3, 3, 33, DType::kF32);
  CheckAgainstReference(kMixedBatch, 1, 1, 31, DType::kF16);
}

TEST_CASE("paged_attention: bad inputs") {
  const AttentionBatch bt = MakeAttentionBatch(kMixedBatch, Geometry(6, 3, 8), DType::kF32);
  auto run = [&](const Tensor& q, const Tensor& kc, const Tensor& tables, const Tensor& lens,
                 const Tensor& starts) {
    ops::PagedAttention(q, kc, kc, tables, lens, starts, 0.5f);
  };
  const Tensor &q = bt.query, &kc = bt.key_cache, &tables = bt.block_tables, &lens = bt.seq_lens,
               &starts = bt.query_start_loc;
  auto i32 = [](const Shape& s, const std::vector<int32_t>& v) { return MakeInts<int32_t>(s, DType::kI32, v); };
  Tensor q4 = MakeFloat({23, 4, 8}, DType::kF32, RandomValues(23 * 32, 1));
  CHECK_THROWS_WITH_AS(run(q4, kc, tables, lens, starts),
                       doctest::Contains("[paged_attention] heads (4) must be a multiple of kv_heads (3)"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(run(q.Reshape({23, 48}), kc, tables, lens, starts),
                       doctest::Contains("[paged_attention] query must have rank 3"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(run(q, MakeInts<int32_t>(kc.shape(), DType::kI32, std::vector<int32_t>(kc.numel(), 0)), tables,
                           lens, starts),
                       doctest::Contains("[paged_attention] key_cache must be [num_blocks, block_size, kv_heads, 8] "
                                         "of float32, float16 or bfloat16"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(run(MakeFloat({23, 6, 16}, DType::kF32, RandomValues(23 * 96, 1)), kc, tables, lens, starts),
                       doctest::Contains("[paged_attention] key_cache must be [num_blocks, block_size, kv_heads, 16]"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(run(q, kc, MakeInts<int64_t>({3, 4}, DType::kI64, std::vector<int64_t>(12, 0)), lens, starts),
                       doctest::Contains("[paged_attention] block_tables must be int32, got int64"), TypeError);
  CHECK_THROWS_WITH_AS(run(q, kc, tables, i32({2}, {1, 1}), starts),
                       doctest::Contains("[paged_attention] seq_lens must have shape [3], got [2]"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(run(q, kc, tables, lens, i32({3}, {0, 1, 18})),
                       doctest::Contains("[paged_attention] query_start_loc must have shape [4], got [3]"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(run(q, kc, tables, lens, i32({4}, {0, 1, 18, 22})),
                       doctest::Contains("[paged_attention] query_start_loc must run from 0 to the query's 23 tokens"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(run(q, kc, tables, lens, i32({4}, {0, 19, 18, 23})),
                       doctest::Contains("[paged_attention] request 1: query_start_loc must be non-decreasing"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(run(q, kc, tables, i32({3}, {33, 16, 40}), starts),
                       doctest::Contains("[paged_attention] request 1: seq_len 16 is shorter than its 17 queries"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(run(q, kc, tables, i32({3}, {65, 17, 40}), starts),
                       doctest::Contains("[paged_attention] request 0: seq_len 65 exceeds the block table's 4 blocks x 16 slots"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(run(q, kc, tables, i32({3}, {49, 17, 40}), starts),
                       doctest::Contains("[paged_attention] request 0: block -1 at block_tables[0, 3] is outside the cache of 12 blocks"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(ops::PagedAttention(q, kc, kc, tables, lens, starts, 0.5f, q),
                       doctest::Contains("[paged_attention] out overlaps query"), std::invalid_argument);
  Tensor out = Tensor::Empty({23, 6, 4}, DType::kF32, DeviceType::kCPU);
  CHECK_THROWS_WITH_AS(ops::PagedAttention(q, kc, kc, tables, lens, starts, 0.5f, out),
                       doctest::Contains("[paged_attention] out must have shape [23, 6, 8]"),
                       std::invalid_argument);
}
