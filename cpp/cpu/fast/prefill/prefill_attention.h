// The blocks of the CPU's prefill attention (paged_attention for batches holding a
// prefill: a request with more than one query), shared by its f32 products on the BLAS
// sgemm (prefill/blas/paged_attention.cpp) and its bf16 products
// (prefill/paged_attention_bf16.cpp); batches of decode requests only are declined (to
// a decode provider or the oracle, cpp/cpu/paged_attention.cpp).
//
// The math is the oracle's two-pass softmax, per (request, kv head, block of up to
// kQueryBlock queries) with the GQA group's query heads stacked as rows:
//   S = (scale * Q) . K^T over keys lo(first query) .. the block's last position  (one GEMM)
//   per row (position p, keys lo(p) .. p; lo = 0, or p - window + 1 with a sliding window):
//     M = max(max_j s_j, sink);  w_j = exp(s_j - M) inside, else 0;  l = sum w_j + exp(sink - M)
//   O = (W . V) / l                                                               (one GEMM)
// (no sinks: sink = -inf). Only the positions some query of the request sees are gathered
// (from lo of its first query), so a key before every window is never read.
// so every key and value tile is read once per block for all its queries and heads. The
// order of the f32 sums differs from the oracle's, and on AVX-512 CPUs the exps are the
// vectorised ones of exp_avx512.h (within 2 ulp of expf). Blocks are spread over
// ParallelFor's threads, each running single-threaded GEMMs.
#pragma once
#include <algorithm>
#include <cstdint>
#include <vector>

#include "cpu/paged_kv.h"
#include "cpu/parallel.h"
#include "metalrt/op_registry.h"

namespace metalrt::cpu::fast::prefill_attention {

// 32 queries x 3 heads of a group: 96 rows per sgemm, and a 512-token prompt still
// splits into 16 blocks per kv head for the threads.
constexpr int64_t kQueryBlock = 32;

// kv_begin: the first position gathered (lo of the request's first query); the gathered
// K/V hold kv_len = seq_len - kv_begin rows a kv head, row j - kv_begin for position j.
struct Request {
  int64_t q_len, seq_len, first_row, kv_begin, kv_len;
};

// lo(p): the first position the query at position p sees (params.window; 0: all).
int64_t WindowStart(const OpCall& call, int64_t p);

// The head's sink logit, -inf when the call has none.
float Sink(const OpCall& call, int64_t head);

// Softmax weights of one score row in place (positions outside first .. last get 0),
// with the head's sink logit in the denominator (-inf: none); returns l. The exps by the
// AVX-512 row (exp_avx512.h, within 2 ulp of expf) where `vector_exp`.
float SoftmaxWeights(float* s, int64_t n_keys, int64_t first, int64_t last, float sink, bool vector_exp);

// Queries [i0, i1) of request r, heads of kv head g: rows (i - i0) * group + (h - g * group),
// times the scale (on the queries, not on the rows x n_keys scores: a pass less).
void LoadScaledQueries(const OpCall& call, const Request& r, int64_t g, int64_t i0, int64_t i1,
                       std::vector<float>& q);

// Output rows of the block, o[row * head_dim + d] / l[row] (row-major), or o[d * rows + row]
// / l[row] where `transposed`.
void StoreBlock(const OpCall& call, const Request& r, int64_t g, int64_t i0, int64_t i1, const float* o,
                bool transposed, const std::vector<float>& l);

// Whether the batch holds a request with more than one query.
bool HasPrefill(const OpCall& call);

// Positions per chunk of the K/V gather: each is kv_heads rows of head_dim values.
constexpr int64_t kMinGatherPositions = 64;

// Every request's blocks through attend(request, keys, values, kv head, i0, i1), after
// prepare(request, keys, values) has made its operands from the gathered K/V.
template <typename Prepare, typename Attend>
void EachBlock(const OpCall& call, const Prepare& prepare, const Attend& attend) {
  const Tensor& block_tables = call.inputs[3];
  const int32_t* seq_lens = call.inputs[4].data_as<int32_t>();
  const int32_t* query_start_loc = call.inputs[5].data_as<int32_t>();
  const int64_t kv_heads = call.inputs[1].dim(2), head_dim = call.inputs[0].dim(2);
  // The op's thread's, grown only: fresh vectors were zero-filled and faulted in by this
  // thread alone, once per layer, while the pool waited. Reached through references: a
  // thread_local named in the lambdas would be each pool thread's own.
  static thread_local std::vector<float> keys_scratch, values_scratch;
  std::vector<float>& keys = keys_scratch;
  std::vector<float>& values = values_scratch;
  for (int64_t b = 0; b < block_tables.dim(0); ++b) {
    Request r{query_start_loc[b + 1] - query_start_loc[b], seq_lens[b], query_start_loc[b], 0, 0};
    if (r.q_len == 0) continue;
    r.kv_begin = WindowStart(call, r.seq_len - r.q_len);
    r.kv_len = r.seq_len - r.kv_begin;
    const int32_t* blocks = block_tables.data_as<int32_t>() + b * block_tables.dim(1);
    keys.resize(std::max(keys.size(), static_cast<size_t>(kv_heads * r.kv_len * head_dim)));
    values.resize(keys.size());
    ParallelFor(r.kv_len, kMinGatherPositions, [&](int64_t begin, int64_t end) {
      const int64_t j0 = r.kv_begin + begin, j1 = r.kv_begin + end;
      GatherContextRange(call.inputs[1], head_dim, blocks, r.kv_len, j0, j1, keys.data(), r.kv_begin);
      GatherContextRange(call.inputs[2], head_dim, blocks, r.kv_len, j0, j1, values.data(), r.kv_begin);
    });
    prepare(r, keys, values);
    // Items (block, kv head), the blocks ordered first, last, second, second-to-last...
    // so that contiguous chunks of items carry about the same causal work.
    const int64_t n_blocks = (r.q_len + kQueryBlock - 1) / kQueryBlock;
    ParallelFor(n_blocks * kv_heads, 1, [&](int64_t begin, int64_t end) {
      for (int64_t item = begin; item < end; ++item) {
        const int64_t t = item / kv_heads, g = item % kv_heads;
        const int64_t block = t % 2 == 0 ? t / 2 : n_blocks - 1 - t / 2;
        const int64_t i0 = block * kQueryBlock;
        attend(r, keys, values, g, i0, std::min(r.q_len, i0 + kQueryBlock));
      }
    });
  }
}

}  // namespace metalrt::cpu::fast::prefill_attention
