// The blocks of the CPU's prefill attention (paged_attention for batches holding a
// prefill: a request with more than one query), shared by its f32 products on the BLAS
// sgemm (prefill/blas/paged_attention.cpp) and its bf16 products
// (prefill/paged_attention_bf16.cpp); batches of decode requests only are declined (to
// a decode provider or the oracle, cpp/cpu/paged_attention.cpp).
//
// The math is the oracle's softmax, computed online over tiles of kKeyTile key positions
// (flash attention's order), per (request, kv head, block of up to kQueryBlock queries)
// with the GQA group's query heads stacked as rows; per row (position p, keys lo(p) .. p;
// lo = 0, or p - window + 1 with a sliding window), starting from m = sink, l = exp(sink - m)
// (no sinks: sink = -inf, l = 0), for each tile T of keys:
//   S_T = (scale * Q) . K_T^T                                                     (one GEMM)
//   m' = max(m, max_j s_j);  w_j = exp(s_j - m') inside, else 0;  a = exp(m - m')
//   l = a l + sum w_j;  O = a O + W_T . V_T;  m = m'                              (one GEMM)
// and O / l at the end. An item is a range of consecutive blocks of one kv head
// (RangeBlocks): each tile of the range's keys is converted from the cache (any KvType,
// dequantized to f32) once into per-thread scratch and used by every block of the range,
// so the scratch is bounded whatever the context (TileScratchHighWater counts it) and no
// copy of the context is made. A key before every window is never read. The order of the
// f32 sums differs from the oracle's two-pass softmax, and on AVX-512 CPUs the exps are the
// vectorised ones of exp_avx512.h (within 2 ulp of expf). Items are spread over
// ParallelFor's threads, each running single-threaded GEMMs.
#pragma once
#include <algorithm>
#include <cstdint>
#include <vector>

#include "cpu/parallel.h"
#include "metalrt/op_registry.h"

namespace metalrt::cpu::fast::prefill_attention {

// 32 queries x 3 heads of a group: 96 rows per sgemm, and a 512-token prompt still
// splits into 16 blocks per kv head for the threads.
constexpr int64_t kQueryBlock = 32;

// kv_begin: the first position some query sees (lo of the request's first query),
// kv_len = seq_len - kv_begin; blocks: the request's block table row.
struct Request {
  int64_t q_len, seq_len, first_row, kv_begin, kv_len;
  const int32_t* blocks;
};

// Positions per K/V tile: a multiple of the AMX step (kAmxK, gemm_bf16.h), so that the
// bf16 product over a block's keys splits at whole steps.
constexpr int64_t kKeyTile = 256;

// dst[(j - begin) * head_dim + d] = feature d of kv head g's row of `cache` (any KvType)
// at position j, in f32 (kv_blocks.h's conversion), for begin <= j < end; rows at or past
// the request's seq_len are zeros.
void LoadTile(const Tensor& cache, int64_t head_dim, const Request& r, int64_t g, int64_t begin, int64_t end,
              float* dst);

// The largest K/V tile scratch (bytes of the buffers one item converts its tiles into)
// that a prefill attention call has used since the last reset: a count for the tests,
// which show it does not grow with the context.
void NoteTileScratch(int64_t bytes);
int64_t TileScratchHighWater();
void ResetTileScratchHighWater();

// lo(p): the first position the query at position p sees (params.window; 0: all).
int64_t WindowStart(const OpCall& call, int64_t p);

// The head's sink logit, -inf when the call has none.
float Sink(const OpCall& call, int64_t head);

// One tile's softmax weights of a score row in place: s[first .. last] (positions the row
// sees; none where first > last) become exp(s_j - m') with m' = max(m, their max), the
// others 0; m becomes m' and l the running sum (l * a + the weights). Returns a =
// exp(m - m') (0 while m is -inf), the factor the row's earlier output gets. The exps by
// the AVX-512 row (exp_avx512.h, within 2 ulp of expf) where `vector_exp`.
float OnlineWeights(float* s, int64_t n, int64_t first, int64_t last, float& m, float& l, bool vector_exp);

// OnlineWeights of every row of one block's tile scores s [rows][n] (column 0: position
// `origin`; row r: the query at position first_query + r / group),
// each row's output rescaled by its a: o[row * head_dim + d], or o[d * rows + row] where
// `transposed`. m, l: the rows' running max and sum.
void WeighTile(const OpCall& call, float* s, int64_t rows, int64_t n, int64_t first_query, int64_t origin,
               float* m, float* l, float* o, bool transposed, bool vector_exp);

// The starting (m, l) of a row of query head `head`: its sink logit and exp(0), or
// (-inf, 0) without sinks.
void OnlineStart(const OpCall& call, int64_t head, float& m, float& l);

// Queries [i0, i1) of request r, heads of kv head g: rows (i - i0) * group + (h - g * group),
// times the scale (on the queries, not on the rows x n_keys scores: a pass less).
void LoadScaledQueries(const OpCall& call, const Request& r, int64_t g, int64_t i0, int64_t i1,
                       std::vector<float>& q);

// Output rows of the block, o[row * head_dim + d] / l[row] (row-major), or o[d * rows + row]
// / l[row] where `transposed`.
void StoreBlock(const OpCall& call, const Request& r, int64_t g, int64_t i0, int64_t i1, const float* o,
                bool transposed, const float* l);

// Whether the batch holds a request with more than one query, outside decode rows
// (DecodeRows, op_registry.h: the decode attention serves every query row of those).
bool HasPrefill(const OpCall& call);

// The most blocks of one item: its per-block state (queries, output, m, l) is bounded too.
constexpr int64_t kMaxRangeBlocks = 16;

// Blocks per item for a request of n_blocks blocks: about two items per thread for every
// kv head's blocks (fewer items convert each tile fewer times), at most kMaxRangeBlocks.
inline int64_t RangeBlocks(int64_t n_blocks, int64_t kv_heads) {
  const int64_t items = 2 * static_cast<int64_t>(ParallelThreadCount());
  return std::clamp<int64_t>(n_blocks * kv_heads / std::max<int64_t>(1, items), 1, kMaxRangeBlocks);
}

// Every request's ranges of blocks through attend(request, kv head, b0, b1): blocks
// [b0, b1) of kQueryBlock queries.
template <typename Attend>
void EachRange(const OpCall& call, const Attend& attend) {
  const Tensor& block_tables = call.inputs[3];
  const int32_t* seq_lens = call.inputs[4].data_as<int32_t>();
  const int32_t* query_start_loc = call.inputs[5].data_as<int32_t>();
  const int64_t kv_heads = call.inputs[1].dim(2);
  for (int64_t b = 0; b < block_tables.dim(0); ++b) {
    Request r{query_start_loc[b + 1] - query_start_loc[b], seq_lens[b], query_start_loc[b], 0, 0,
              block_tables.data_as<int32_t>() + b * block_tables.dim(1)};
    if (r.q_len == 0) continue;
    r.kv_begin = WindowStart(call, r.seq_len - r.q_len);
    r.kv_len = r.seq_len - r.kv_begin;
    const int64_t n_blocks = (r.q_len + kQueryBlock - 1) / kQueryBlock;
    const int64_t per_range = RangeBlocks(n_blocks, kv_heads), n_ranges = (n_blocks + per_range - 1) / per_range;
    // Items (range, kv head), the ranges ordered first, last, second, second-to-last...
    // so that contiguous chunks of items carry about the same causal work.
    ParallelFor(n_ranges * kv_heads, 1, [&](int64_t begin, int64_t end) {
      for (int64_t item = begin; item < end; ++item) {
        const int64_t t = item / kv_heads, g = item % kv_heads;
        const int64_t range = t % 2 == 0 ? t / 2 : n_ranges - 1 - t / 2;
        attend(r, g, range * per_range, std::min(n_blocks, (range + 1) * per_range));
      }
    });
  }
}

}  // namespace metalrt::cpu::fast::prefill_attention
