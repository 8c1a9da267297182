// Variable-length causal paged attention with grouped-query heads (vLLM's layout).
// Shapes and dtypes are checked here; the values of block_tables, seq_lens and
// query_start_loc are checked by the provider, which is where they are host-visible.
#include <cmath>
#include <string>

#include "ops/op_common.h"

namespace metalrt::ops {

Tensor PagedAttention(const Tensor& query, const Tensor& key_cache, const Tensor& value_cache,
                      const Tensor& block_tables, const Tensor& seq_lens,
                      const Tensor& query_start_loc, float scale, const OptTensor& out) {
  using namespace detail;
  constexpr const char* kOp = "paged_attention";
  CheckRank(query, 3, kOp, "query");
  CheckFloat(query, kOp, "query");
  CheckRank(key_cache, 4, kOp, "key_cache");
  CheckShape(value_cache, key_cache.shape(), kOp, "value_cache");
  CheckSameDType(query, key_cache, kOp, "query", "key_cache");
  CheckSameDType(query, value_cache, kOp, "query", "value_cache");
  const int64_t heads = query.dim(1), head_dim = query.dim(2), kv_heads = key_cache.dim(2);
  Check(key_cache.dim(3) == head_dim, kOp,
        "key_cache head_dim must equal query's " + std::to_string(head_dim) + ", got shape " +
            ShapeToString(key_cache.shape()));
  Check(kv_heads > 0 && heads % kv_heads == 0, kOp,
        "heads (" + std::to_string(heads) + ") must be a multiple of kv_heads (" +
            std::to_string(kv_heads) + ")");
  CheckRank(block_tables, 2, kOp, "block_tables");
  CheckDType(block_tables, DType::kI32, kOp, "block_tables");
  const int64_t batch = block_tables.dim(0);
  CheckShape(seq_lens, {batch}, kOp, "seq_lens");
  CheckDType(seq_lens, DType::kI32, kOp, "seq_lens");
  CheckShape(query_start_loc, {batch + 1}, kOp, "query_start_loc");
  CheckDType(query_start_loc, DType::kI32, kOp, "query_start_loc");
  Check(std::isfinite(scale), kOp, "scale must be finite, got " + std::to_string(scale));
  CheckContiguous(query, kOp, "query");
  CheckContiguous(key_cache, kOp, "key_cache");
  CheckContiguous(value_cache, kOp, "value_cache");
  CheckContiguous(block_tables, kOp, "block_tables");
  CheckContiguous(seq_lens, kOp, "seq_lens");
  CheckContiguous(query_start_loc, kOp, "query_start_loc");
  const DeviceType device = CommonDevice(
      {&query, &key_cache, &value_cache, &block_tables, &seq_lens, &query_start_loc}, kOp);
  Tensor result = OutputOrNew(out, query.shape(), query.dtype(), device, kOp);
  for (const auto& [input, name] : {std::pair<const Tensor&, const char*>{query, "query"},
                                    {key_cache, "key_cache"},
                                    {value_cache, "value_cache"},
                                    {block_tables, "block_tables"},
                                    {seq_lens, "seq_lens"},
                                    {query_start_loc, "query_start_loc"}})
    CheckNoOverlap(result, input, kOp, name);
  RunOp(kOp, device,
        OpCall{{query, key_cache, value_cache, block_tables, seq_lens, query_start_loc},
               {result},
               PagedAttentionParams{scale}});
  return result;
}

}  // namespace metalrt::ops
