// Variable-length causal paged attention with grouped-query heads (vLLM's layout).
// Shapes, dtypes and the values of the batch description (block_tables, seq_lens,
// query_start_loc) are checked here, before any provider runs: those values are written
// by the host (vLLM builds them on the CPU too) and read in place on every device — on
// Metal through unified memory, waiting only for submitted work that writes them
// (ReadableOnHost) — so no kernel reads outside the cache or the query.
#include <algorithm>
#include <cmath>
#include <string>

#include "ops/kv_cache_checks.h"
#include "ops/op_common.h"

namespace metalrt::ops {
namespace {

constexpr const char* kOp = "paged_attention";

// Every request's queries lie inside the query and its context inside its block-table
// row, and every block of that context a query can see (with a window, from the first
// query's window on) inside the cache.
void CheckBatch(int64_t tokens, const Tensor& key_cache, const Tensor& block_tables,
                const int32_t* seq_lens, const int32_t* query_start_loc, int64_t window) {
  const int64_t batch = block_tables.dim(0), max_blocks = block_tables.dim(1);
  const int64_t num_blocks = key_cache.dim(0), block_size = key_cache.dim(1);
  Check(query_start_loc[0] == 0 && query_start_loc[batch] == tokens, kOp,
        "query_start_loc must run from 0 to the query's " + std::to_string(tokens) +
            " tokens, got " + std::to_string(query_start_loc[0]) + " .. " +
            std::to_string(query_start_loc[batch]));
  for (int64_t b = 0; b < batch; ++b) {
    const std::string req = "request " + std::to_string(b) + ": ";
    // In 64 bits: a start far below its predecessor would overflow int32.
    const int64_t q_len = int64_t{query_start_loc[b + 1]} - query_start_loc[b];
    Check(q_len >= 0, kOp, req + "query_start_loc must be non-decreasing");
    Check(seq_lens[b] >= q_len, kOp,
          req + "seq_len " + std::to_string(seq_lens[b]) + " is shorter than its " +
              std::to_string(q_len) + " queries");
    Check(seq_lens[b] <= max_blocks * block_size, kOp,
          req + "seq_len " + std::to_string(seq_lens[b]) + " exceeds the block table's " +
              std::to_string(max_blocks) + " blocks x " + std::to_string(block_size) + " slots");
    const int32_t* blocks = block_tables.data_as<int32_t>() + b * max_blocks;
    const int64_t first_seen = window > 0 ? std::max<int64_t>(0, seq_lens[b] - q_len - window + 1) : 0;
    for (int64_t i = first_seen / block_size; i < (seq_lens[b] + block_size - 1) / block_size; ++i)
      Check(blocks[i] >= 0 && blocks[i] < num_blocks, kOp,
            req + "block " + std::to_string(blocks[i]) + " at block_tables[" + std::to_string(b) +
                ", " + std::to_string(i) + "] is outside the cache of " +
                std::to_string(num_blocks) + " blocks");
  }
}

}  // namespace

Tensor PagedAttention(const Tensor& query, const Tensor& key_cache, const Tensor& value_cache,
                      const Tensor& block_tables, const Tensor& seq_lens,
                      const Tensor& query_start_loc, float scale, const OptTensor& out,
                      bool coarse_projections, int64_t window, const OptTensor& sinks) {
  using namespace detail;
  CheckRank(query, 3, kOp, "query");
  CheckFloat(query, kOp, "query");
  const int64_t heads = query.dim(1), head_dim = query.dim(2);
  CheckKvCaches(key_cache, value_cache, head_dim, kOp);
  const int64_t kv_heads = key_cache.dim(2);
  // Every context position is looked up as block position / block_size.
  Check(key_cache.dim(1) >= 1, kOp,
        "key_cache must have block_size >= 1, got shape " + ShapeToString(key_cache.shape()));
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
  Check(window >= 0, kOp,
        "window must be >= 0 (0: full attention), got " + std::to_string(window));
  if (sinks) {
    CheckShape(*sinks, {heads}, kOp, "sinks");
    CheckDType(*sinks, DType::kF32, kOp, "sinks");
    CheckContiguous(*sinks, kOp, "sinks");
  }
  CheckContiguous(query, kOp, "query");
  CheckContiguous(block_tables, kOp, "block_tables");
  CheckContiguous(seq_lens, kOp, "seq_lens");
  CheckContiguous(query_start_loc, kOp, "query_start_loc");
  const DeviceType device = CommonDevice(
      {&query, &key_cache, &value_cache, &block_tables, &seq_lens, &query_start_loc, &OrUndefined(sinks)},
      kOp);
  Tensor result = OutputOrNew(out, query.shape(), query.dtype(), device, kOp);
  for (const auto& [input, name] : {std::pair<const Tensor&, const char*>{query, "query"},
                                    {key_cache, "key_cache"},
                                    {value_cache, "value_cache"},
                                    {block_tables, "block_tables"},
                                    {seq_lens, "seq_lens"},
                                    {query_start_loc, "query_start_loc"}})
    CheckNoOverlap(result, input, kOp, name);
  if (sinks) CheckNoOverlap(result, *sinks, kOp, "sinks");
  for (const auto& [t, name] : {std::pair<const Tensor&, const char*>{block_tables, "block_tables"},
                                {seq_lens, "seq_lens"},
                                {query_start_loc, "query_start_loc"}})
    Check(ReadableOnHost(t), kOp, std::string(name) + " must be readable by the host (CPU or unified memory)");
  CheckBatch(query.dim(0), key_cache, block_tables, seq_lens.data_as<int32_t>(),
             query_start_loc.data_as<int32_t>(), window);
  OpCall call{{query, key_cache, value_cache, block_tables, seq_lens, query_start_loc},
              {result},
              PagedAttentionParams{scale, coarse_projections, window}};
  if (sinks) call.inputs.push_back(*sinks);
  RunOp(kOp, device, call);
  return result;
}

}  // namespace metalrt::ops
